"""supervise: TODO docstring."""
