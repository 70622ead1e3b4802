"""One reader per agent CLI: its answer, usage, error and quota from what it printed."""
