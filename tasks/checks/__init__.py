"""Checks on a plan's diff: the check runs posted to GitHub and the built-in diff analysis."""
