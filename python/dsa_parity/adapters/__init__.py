"""Adapters: exec2 workers that drive another project's own DSA code (never vendored here)."""
