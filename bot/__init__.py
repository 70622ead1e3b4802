"""gaffer: plans, approvals and pull requests for coding agents, as a GitHub App."""
