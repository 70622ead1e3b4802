"""The plan's stages as workers run them: planning, execution, verification, the pull request."""
