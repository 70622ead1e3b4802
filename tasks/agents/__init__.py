"""Agent CLIs: their definitions, reading their output and usage, pricing, the script agent."""
