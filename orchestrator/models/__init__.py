"""models: TODO docstring."""
