"""The package version (`zoo.__version__`, `zoo --version`); pyproject.toml's `version` says the same."""

VERSION = "0.1.0"
