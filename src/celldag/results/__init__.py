"""A run's results as tables: leaderboard and ranks, floor cards, quality checks, the reference and its verdicts."""
