"""Aggregation of per-run scores and run records into the results table and the leaderboard."""
