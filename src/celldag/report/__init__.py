"""The report's views: leaderboard Markdown, HTML pages, shared figures and the check page, from ``celldag.results``."""
