"""Machine-readable access to the specification: rule IDs, worked examples, golden vectors."""
