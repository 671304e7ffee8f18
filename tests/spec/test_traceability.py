"""Rule IDs: well-formed, unique, and every one cited by the reference code."""

from __future__ import annotations

import re
from pathlib import Path

from thd_packing.spec.examples import ERRATA_FILE, RULE_ID, SPEC_VERSION, rule_ids

ROOT = Path(__file__).resolve().parents[2]
ADAPTER_ONLY = {rule for rule in rule_ids() if rule.startswith("R-MEG-")}  # spec section 12
# Spec §1a: devices; a host-only implementation such as the NumPy reference has none.
DEVICE_ONLY = {rule for rule in rule_ids() if rule.startswith("R-DEV-")}


def test_rule_ids_unique_and_well_formed() -> None:
    ids = rule_ids()
    assert len(ids) == len(set(ids)), "a rule ID is defined twice"
    assert all(re.fullmatch(r"R-[A-Z][A-Z0-9]*-[0-9]+", rule) for rule in ids)
    assert len(ids) >= 50


def test_reference_cites_every_rule() -> None:
    cited: set[str] = set()
    for path in (ROOT / "thd_packing" / "reference").glob("*.py"):
        cited.update(RULE_ID.findall(path.read_text()))
    missing = set(rule_ids()) - ADAPTER_ONLY - DEVICE_ONLY - cited
    assert not missing, f"rules the reference does not cite: {sorted(missing)}"
    assert not cited - set(rule_ids()), "the reference cites rules the spec does not define"


def test_errata_cite_defined_rules() -> None:
    cited = set(RULE_ID.findall(ERRATA_FILE.read_text()))
    assert cited and cited <= set(rule_ids())


def test_versions_agree() -> None:
    from thd_packing import reference

    assert reference.SPEC_VERSION == SPEC_VERSION
    spec = ROOT / "thd_packing" / "spec" / "thd-packing.md"
    assert f"version {SPEC_VERSION}" in spec.read_text()


def test_device_rules_have_impl_tests() -> None:
    """Spec section 1a's rules are a device API's: the suite leaves them out, impl's own tests
    (tests/impl/, on torch's `meta` device) cite each one."""
    from thd_packing.conformance.rules import cited_rules

    cited = cited_rules((ROOT / "tests" / "impl").glob("test_*.py"))
    missing = sorted(DEVICE_ONLY - set(cited))
    assert DEVICE_ONLY and not missing, f"device rules no impl test cites: {missing}"
