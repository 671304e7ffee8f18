"""Meta tests: every rule the suite judges is checked by some test, and every cited rule
exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .rejections import rows as rejection_rows
from .rules import cited_rules, spec_examples, spec_rules, suite_rules

HERE = Path(__file__).resolve().parent


def _cited_rules() -> dict[str, set[str]]:
    """Rule IDs cited by the suite's test modules (`cited_rules`), the spec examples and the
    rejection table's rows (test_rejections.py)."""
    cited = cited_rules(HERE.glob("test_*.py"))
    for example in spec_examples():
        for rule in example["rules"]:
            cited.setdefault(rule, set()).add("test_spec_examples.py")
    for key, row in rejection_rows():
        for rule in (key, *row.also, *row.cites):
            cited.setdefault(rule, set()).add("test_rejections.py")
    return cited


@pytest.mark.meta
def test_every_spec_rule_has_a_test() -> None:
    """A rule the suite judges without a conformance test is a gap in the product (the device
    rules' tests are impl's own: tests/spec/test_traceability.py checks each has one)."""
    missing = sorted(set(suite_rules()) - set(_cited_rules()))
    assert not missing, f"spec rules without a conformance test: {missing}"


@pytest.mark.meta
def test_every_cited_rule_exists() -> None:
    """A typo in a marker would make a test count for a rule that does not exist."""
    unknown = sorted(set(_cited_rules()) - set(spec_rules()))
    assert not unknown, f"tests cite rules that are not in spec/: {unknown}"


@pytest.mark.meta
def test_every_test_declares_rules() -> None:
    """Each test function carries a rules marker (meta tests a meta marker)."""
    bare = []
    for path in sorted(HERE.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marks = {d.func.attr for d in node.decorator_list
                         if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)}
                marks |= {d.attr for d in node.decorator_list if isinstance(d, ast.Attribute)}
                if not marks & {"rules", "meta", "parametrize"}:
                    bare.append(f"{path.name}::{node.name}")
    assert not bare, f"tests without @pytest.mark.rules: {bare}"
