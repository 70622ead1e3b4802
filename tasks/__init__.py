"""Worker side of gaffer: Celery tasks, worktrees, agents and checks."""
