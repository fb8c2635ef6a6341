"""The package's version (pyproject.toml's `version`)."""

__version__ = "0.1.0"
