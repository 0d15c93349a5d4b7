"""launch: TODO docstring."""
