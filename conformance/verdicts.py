"""How a check ends when it does not pass: a rule verdict, or a fault of the target.

Every check of the suite (the contract tier in `contract.py`, the differential tier in
`running.py` and `compare.py`, through `harness.py`) raises one of these two, and the report
(`conftest.py`) reads them:

- `RuleViolation`: the target's output disproves the named rules. The report charges the failure
  to exactly those rules.
- `TargetError`: the target (or its adapter) crashed, or returned something the protocol does
  not allow (a missing key, an array of the wrong rank, a row count that cannot be read), so no
  rule could be decided. The report lists it apart from the rule verdicts, with its traceback,
  and charges it to no rule.
"""

from __future__ import annotations


class RuleViolation(AssertionError):
    """A failed check that knows which rules it disproves. The report attributes the failure to
    these rules instead of every rule the test cites (a wrong total is not a wrong row)."""

    def __init__(self, message: str, rules: set[str]) -> None:
        super().__init__(f"{message} [{', '.join(sorted(rules))}]")
        self.rules = frozenset(rules)


class TargetError(Exception):
    """The target or its adapter failed outside its own validation, or returned a value the
    protocol does not allow: no rule is decided (see the module docstring)."""
