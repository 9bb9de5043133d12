"""Applications of the policy and its tools: homework grading, derivation checking, plots and
adaptive practice. Each is a library function and a ``python -m agentic_jax.apps.<name>``
command; the server's page calls the same functions."""
