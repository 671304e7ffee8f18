"""Worked examples for conformance/README.md."""
