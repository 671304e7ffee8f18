"""CPU checks of the GPU tests' references and torch fallback (run by `nox -s tests`)."""
