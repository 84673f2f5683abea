"""Portable C sources shipped with Ember (kernel library headers inlined into generated code)."""
