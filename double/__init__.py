"""A GitHub double for tests and `gaffer demo`, checked against GitHub's REST contract."""

from .app import GitHubState, create_github_double
from .contract import ContractError, SpecNotInstalledError, validate_request

__all__ = [
    "ContractError",
    "GitHubState",
    "SpecNotInstalledError",
    "create_github_double",
    "validate_request",
]
