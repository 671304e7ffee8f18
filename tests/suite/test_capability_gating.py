"""A target that declines features gets no failure from them."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings

from thd_packing.conformance import strategies as s
from thd_packing.conformance.protocol import CAPABILITIES
from thd_packing.conformance.rules import UNDER_FEATURE, suite_rules

from .runner import run_suite

NONE = frozenset({"need_roll", "pad_value"})


@settings(max_examples=300, deadline=None)
@given(s.pack_cases(caps=NONE))
def test_strategies_never_draw_declined_features(case: s.PackCase) -> None:
    assert not s.declined(NONE, case.config, case.batch.lengths, case.batch.trail), case


def test_declined_features_never_fail(tmp_path: Path) -> None:
    """The reference declining bucket, fp8 and min_local_rows (its adapter raises
    NotImplementedError for them): no failure at all, and the rules whose only tests are about
    those features are reported "declined", naming them."""
    report = run_suite("fake_declarations:DecliningTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py",
                       "thd_packing/conformance/test_invariants.py",
                       "thd_packing/conformance/test_spec_examples.py",
                       "thd_packing/conformance/test_rejections.py")
    failed = [t for t in report["tests"] if t["status"] not in ("pass", "declined", "skip")]
    assert not failed, failed
    rules = report["rules"]
    assert rules["R-TOTAL-1"]["status"] == "declined", rules["R-TOTAL-1"]
    assert "fp8" in rules["R-TOTAL-1"]["declined"]
    declined = {cap for row in rules.values() for cap in row.get("declined", [])}
    assert {"bucket", "fp8", "min_local_rows"} <= declined, declined
    assert "Failing explicit example" not in report["_stdout"]


def test_need_roll_type_check_can_be_declined(tmp_path: Path) -> None:
    """A packer that leaves need_roll's type to its callers declares it (validated_elsewhere
    "need_roll_type"): the rejection test is declined, not an R-ERR-1 failure."""
    report = run_suite("fake_declarations:LenientRollTarget", tmp_path,
                       "thd_packing/conformance/test_rejections.py")
    roll = [t for t in report["tests"] if "-need_roll=" in t["test"]]
    assert roll and {t["status"] for t in roll} == {"declined"}, roll
    assert report["rules"]["R-ERR-1"]["status"] == "pass", report["rules"]["R-ERR-1"]


def test_no_position_ids_is_no_crash(tmp_path: Path) -> None:
    """A target whose ranks give no position ids (Packed(position_ids=None)): the position
    checks go unchecked where they are missing, never a target error or a suite error."""
    report = run_suite("fake_declarations:NoPositionsTarget", tmp_path,
                       "thd_packing/conformance/test_contract.py::test_contract_positions",
                       "thd_packing/conformance/test_contract.py::test_contract_position_boundaries",
                       "thd_packing/conformance/test_invariants.py::test_every_token_exactly_once")
    bad = [t for t in report["tests"] if t["status"] not in ("pass", "skip", "declined")]
    assert not bad, bad


def test_position_ids_on_some_ranks_are_judged_there(tmp_path: Path) -> None:
    """A target with position ids at cp = 1 only (AReaL's case): the tests that also draw
    cp = 1 judge its position-id rules there (pass), only the CP-only test declines them."""
    report = run_suite("fake_declarations:NoPositionsTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py::test_pack_matches_reference",
                       "thd_packing/conformance/test_differential.py::test_zigzag_matches_reference")
    statuses = {t["test"].split("::")[-1]: t["status"] for t in report["tests"]}
    assert statuses == {"test_pack_matches_reference": "pass",
                        "test_zigzag_matches_reference": "pass"}, statuses
    rule = report["rules"]["R-POS-2"]  # cited by both tests
    assert rule["status"] == "pass", rule
    assert rule["tests"] == {
        "thd_packing/conformance/test_differential.py::test_pack_matches_reference": "pass",
        "thd_packing/conformance/test_differential.py::test_zigzag_matches_reference":
            "declined"}, rule


def test_no_rule_of_a_declined_feature_passes(tmp_path: Path) -> None:
    """A target without FP8, labels beside the inputs or a padding segment: the tests that run
    for every target and cite those rules (the contract's degenerate cases, the minimal total)
    do not report them passed; they are declined, and the rules those tests judge pass."""
    report = run_suite("fake_declarations:DecliningTarget", tmp_path,
                       "thd_packing/conformance/test_contract.py",
                       "thd_packing/conformance/test_minimal_total.py")
    rules = report["rules"]
    for rule, cap in (("R-CONSUMER-5", "fp8"), ("R-CONSUMER-15", "labels_ignore"),
                      ("R-FP8-1", "fp8"), ("R-TOTAL-1", "fp8"), ("R-TAIL-1", "tail_segment")):
        assert rules[rule]["status"] == "declined", (rule, rules[rule])
        assert cap in rules[rule]["declined"], (rule, rules[rule])
    for rule in ("R-CONSUMER-1", "R-CONSUMER-4", "R-CONSUMER-7", "R-CONSUMER-11", "R-TOTAL-2",
                 "R-TOTAL-4"):
        assert rules[rule]["status"] == "pass", (rule, rules[rule])


def test_rules_under_a_feature_are_spec_rules_and_capabilities() -> None:
    """Each entry of rules.UNDER_FEATURE names a rule the suite judges and a capability."""
    assert set(UNDER_FEATURE) <= set(suite_rules()), set(UNDER_FEATURE) - set(suite_rules())
    named = {cap for under in UNDER_FEATURE.values()
             for cap in ((under,) if isinstance(under, str) else under)}
    assert named <= CAPABILITIES, named - CAPABILITIES


def test_contract_judges_position_ids_where_given(tmp_path: Path) -> None:
    """Position ids at cp = 1 only, wrong there: the contract tier judges the draws that have
    them and reports R-CONSUMER-10 and R-PID-2 failed (a draw without them is not judged, and
    does not decline the whole test)."""
    report = run_suite("fake_declarations:RunOnPositionsTarget", tmp_path,
                       "thd_packing/conformance/test_contract.py::test_contract_positions",
                       "thd_packing/conformance/test_contract.py::test_contract_position_boundaries")
    for rule in ("R-CONSUMER-10", "R-PID-2"):
        assert report["rules"][rule]["status"] == "fail", (rule, report["rules"][rule])


def test_contract_judges_optional_meta_where_given(tmp_path: Path) -> None:
    """cu_seqlens and max_seqlen at cp = 1 only, wrong there: R-CONSUMER-8 and -9 fail on those
    draws (a draw without the fields is not judged, and does not skip the whole test); a
    target that never gives them has both declined, naming the field."""
    tests = ("thd_packing/conformance/test_contract.py::test_contract_real_cu_seqlens",
             "thd_packing/conformance/test_contract.py::test_contract_max_seqlen")
    report = run_suite("fake_declarations:PaddedCuSeqlensAtCp1Target", tmp_path / "cp1", *tests,
                       profile="ci")
    for rule in ("R-CONSUMER-8", "R-CONSUMER-9"):
        assert report["rules"][rule]["status"] == "fail", (rule, report["rules"][rule])
    report = run_suite("fake_declarations:NoCuSeqlensTarget", tmp_path / "none", *tests)
    for rule, field in (("R-CONSUMER-8", "cu_seqlens"), ("R-CONSUMER-9", "max_seqlen")):
        row = report["rules"][rule]
        assert row["status"] == "declined" and row["declined"] == [field], (rule, row)


def test_no_position_ids_are_declined(tmp_path: Path) -> None:
    """A target that never gives position ids: the rules only position ids decide are reported
    declined ("returns no position ids"), never passed; its rows are still judged."""
    report = run_suite("fake_declarations:NoPositionIdsTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py::test_pack_matches_reference",
                       "thd_packing/conformance/test_contract.py::test_contract_positions",
                       "thd_packing/conformance/test_invariants.py::test_every_token_exactly_once")
    rules = report["rules"]
    for rule in ("R-POS-1", "R-POS-2", "R-POS-3", "R-CONSUMER-10"):
        assert rules[rule]["status"] == "declined", (rule, rules[rule])
        assert rules[rule]["declined"] == ["position_ids"], (rule, rules[rule])
    assert report["declined"] == {"position_ids": "target 'no-position-ids': returns no position "
                                  "ids"}, report["declined"]
    assert rules["R-ROW-1"]["status"] == "pass", rules["R-ROW-1"]
    statuses = {t["test"].split("::")[-1]: t["status"] for t in report["tests"]}
    assert statuses == {"test_pack_matches_reference": "pass",
                        "test_contract_positions": "declined",
                        "test_every_token_exactly_once": "pass"}, statuses


def test_loss_mask_reading_the_last_token_fails(tmp_path: Path) -> None:
    """A loss mask that reads each sequence's last real token (a label from the next
    sequence) fails R-LABEL-3; the reference's own mask passes it."""
    args = ("thd_packing/conformance/test_differential.py", "-k", "loss_mask")
    bad = run_suite("fake_targets:LastTokenLossMaskTarget", tmp_path / "bad", *args)
    assert bad["rules"]["R-LABEL-3"]["status"] == "fail", bad["rules"]["R-LABEL-3"]
    good = run_suite("reference", tmp_path / "good", *args)
    assert good["rules"]["R-LABEL-3"]["status"] == "pass", good["rules"]["R-LABEL-3"]
