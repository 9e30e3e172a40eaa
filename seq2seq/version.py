"""The package's version, as pyproject.toml gives it (one module, below every stage, so
that the model card, the Hub, the export and the server name it without importing the
package's public API)."""

__version__ = "0.2.0"
