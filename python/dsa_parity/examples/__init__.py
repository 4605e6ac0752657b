"""Example exec2 workers (adapters)."""
