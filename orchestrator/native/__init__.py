"""native: TODO docstring."""
