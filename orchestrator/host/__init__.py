"""host: TODO docstring."""
