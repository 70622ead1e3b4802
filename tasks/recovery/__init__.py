"""Putting things right: the reconciler, dead jobs, cleanup after a plan, stray processes."""
