"""THD packing conformance suite: a hypothesis-driven differential test against reference/."""
