"""config: TODO docstring."""
