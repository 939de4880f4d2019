"""The client's release: the repository's VERSION file (a test keeps them equal)."""

__version__ = "0.1.0"
