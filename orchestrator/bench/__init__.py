"""bench: TODO docstring."""
