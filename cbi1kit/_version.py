"""cbi1kit's version, stated here only (``pyproject.toml`` reads it; the dataset records it)."""

__version__ = "0.1.0"
