"""serve: TODO docstring."""
