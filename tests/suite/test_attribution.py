"""Honest failure attribution: a convention difference gets a rule verdict, a crash of the
target fails R-CONSUMER-17 alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .runner import run_suite


def test_trailing_segment_gets_a_rule_verdict(tmp_path: Path) -> None:
    """B + 1 padded segments (the total padding as its own segment) is R-META-1 / R-META-3,
    never a crash of a check (zip() of B lengths with B + 1 segments)."""
    report = run_suite("fake_targets:TrailingSegmentTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py::test_plan_alignment_matches_reference",
                       "thd_packing/conformance/test_differential.py::test_pack_matches_reference",
                       "thd_packing/conformance/test_invariants.py")
    crashed = [t for t in report["tests"] if t["status"] in ("error", "target-error")]
    assert not crashed, crashed
    assert report["rules"]["R-META-3"]["status"] == "fail", report["rules"]["R-META-3"]
    invariants = [t for t in report["tests"]
                  if t["test"].endswith("test_alignment_and_smallest_total")]
    assert invariants and invariants[0]["status"] == "fail"
    assert set(invariants[0]["rules"]) <= {"R-META-1", "R-META-3"}, invariants[0]


def test_crash_is_a_failure_of_its_own_rule(tmp_path: Path) -> None:
    """A pack that raises ZeroDivisionError on valid cases: every differential test fails
    R-CONSUMER-17 (a valid input packed to nothing) with the traceback, and no rule of the
    differential tier is charged with it: they are blocked by it."""
    report = run_suite("fake_targets:CrashingTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py::test_plan_alignment_matches_reference",
                       "thd_packing/conformance/test_differential.py::test_pack_matches_reference",
                       "thd_packing/conformance/test_differential.py::test_zero_length_sequences_match_reference")
    ran = [t for t in report["tests"] if t["status"] not in ("declined", "skip")]
    assert ran and all(t["status"] == "fail" and t["crashed"] for t in ran), ran
    assert all(t["rules"] == ["R-CONSUMER-17"] for t in ran)
    assert report["summary"]["fail"] == 1
    assert any("ZeroDivisionError" in tb for e in report["target_errors"]
               for tb in e["tracebacks"])
    assert report["target_errors"][0]["counterexamples"], report["target_errors"][0]


def test_convention_bugs_are_charged_to_their_rules(tmp_path: Path) -> None:
    """Spec 1.1: each convention's check can fail, on the rule that explains it: MXFP8 padded
    to tp * cp * 16 (R-CONSUMER-5 on the contract tier, R-TOTAL-1 / R-FP8-1 and the brute-force
    minimal total on the differential one), max_num_seqs ignored (R-STATIC-1, R-ERR-13), tp kept
    in seq_align='cp' (R-ALIGN-5), the padding segment's position ids (R-TAIL-2)."""
    report = run_suite(
        "fake_targets:ConventionBugsTarget", tmp_path,
        "thd_packing/conformance/test_contract.py::test_contract_fp8_split",
        "thd_packing/conformance/test_differential.py::test_plan_fp8_recipes_match_reference",
        "thd_packing/conformance/test_differential.py::test_plan_seq_align_cp_matches_reference",
        "thd_packing/conformance/test_differential.py::test_tail_segment_matches_reference",
        "thd_packing/conformance/test_differential.py::test_static_metadata_matches_reference",
        "thd_packing/conformance/test_minimal_total.py",
        "thd_packing/conformance/test_static_metadata.py",
        "thd_packing/conformance/test_rejections.py")
    crashed = [t for t in report["tests"] if t["status"] in ("error", "target-error")]
    assert not crashed, crashed
    rules = report["rules"]
    for rule in ("R-CONSUMER-5", "R-ALIGN-5", "R-TAIL-2", "R-STATIC-1", "R-ERR-13"):
        assert rules[rule]["status"] == "fail", (rule, rules[rule])
    assert "fail" in {rules["R-TOTAL-1"]["status"], rules["R-FP8-1"]["status"]}
    by_test = {t["test"].split("::")[-1]: t for t in report["tests"]}
    assert by_test["test_total_is_the_smallest_meeting_every_requirement"]["status"] == "fail"


def test_spec_example_mismatch_is_charged_to_its_fields_rule(tmp_path: Path) -> None:
    """A wrong max_seqlen fails the worked examples on R-META-4 (or R-STATIC-2 under
    max_seqlen='total') only, never on the other rules an example is tagged with."""
    report = run_suite("fake_targets:WrongMaxSeqlenTarget", tmp_path,
                       "thd_packing/conformance/test_spec_examples.py")
    failed = [t for t in report["tests"] if t["status"] == "fail"]
    assert failed, report["tests"]
    wrong = [t for t in failed if not set(t["rules"]) <= {"R-META-4", "R-STATIC-2"}]
    assert not wrong, wrong
    assert report["rules"]["R-META-1"]["status"] != "fail", report["rules"]["R-META-1"]


ROW_TESTS = ("test_pack_matches_reference", "test_single_rank_matches_reference",
             "test_zigzag_matches_reference", "test_need_roll_matches_reference")


def _row_tests(report: dict) -> dict[str, dict]:
    return {t["test"].split("::")[-1]: t for t in report["tests"]
            if t["test"].split("::")[-1] in ROW_TESTS}


def _only_side_failures(report: dict, rules: set[str]) -> None:
    """Every row test ran to its end: its own rules passed, and it failed only on `rules`,
    which it does not cite, met on its way."""
    tests = _row_tests(report)
    assert set(tests) == set(ROW_TESTS), tests
    for name, test in tests.items():
        assert test["status"] == "fail" and not test["rules"], (name, test)
        assert test["passed_rules"], (name, test)
        met = {rule for side in test["side_failures"] for rule in side["rules"]}
        assert met and met <= rules, (name, test["side_failures"])


def test_rows_are_judged_on_the_plan_the_target_reports(tmp_path: Path) -> None:
    """A plan one modulus too long (R-TOTAL-4) with the rows right on it: the row tests judge
    the rows on that plan, so sharding, rows and position ids pass instead of being blocked by
    the plan, and the plan's failure is reported beside them. The same plan with reversed rows
    fails R-ROW-1 there: judging on the target's plan still finds row bugs."""
    tests = [f"thd_packing/conformance/test_differential.py::{name}" for name in ROW_TESTS]
    right = run_suite("fake_targets:PadsOneBlockMoreTarget", tmp_path / "right", *tests)
    _only_side_failures(right, {"R-TOTAL-4", "R-TOTAL-5", "R-META-3", "R-META-5"})
    rules = right["rules"]
    for rule in ("R-SHARD-1", "R-SHARD-2", "R-ROW-1", "R-ROW-2", "R-POS-2", "R-ROLL-1"):
        assert rules[rule]["status"] == "pass", (rule, rules[rule])
    assert rules["R-TOTAL-4"]["status"] == "fail", rules["R-TOTAL-4"]
    assert any("R-TOTAL-4" in f["rules"] for f in right["findings"]), right["findings"]
    wrong = run_suite("fake_targets:PadsMoreReversedTarget", tmp_path / "wrong", *tests)
    assert {t["status"] for t in _row_tests(wrong).values()} == {"fail"}, _row_tests(wrong)
    assert wrong["rules"]["R-ROW-1"]["status"] == "fail", wrong["rules"]["R-ROW-1"]


def test_a_wrong_slot_of_another_rule_blocks_no_row_test(tmp_path: Path) -> None:
    """The padding segment's position ids wrong (R-TAIL-2): the tail-segment test fails on it;
    the combined row test, which does not cite R-TAIL-2, judges its own rules to the end and
    reports R-TAIL-2 failed on its way (before, R-TAIL-2 blocked them)."""
    report = run_suite("fake_targets:SegmentIdsZeroTarget", tmp_path,
                       *(f"thd_packing/conformance/test_differential.py::{name}"
                         for name in (*ROW_TESTS, "test_tail_segment_matches_reference")),
                       profile="ci")
    rules = report["rules"]
    assert rules["R-TAIL-2"]["status"] == "fail", rules["R-TAIL-2"]
    for rule in ("R-IN-1", "R-ALIGN-4", "R-ROW-1", "R-ROW-2", "R-POS-1", "R-POS-2", "R-POS-3",
                 "R-SHARD-1", "R-SHARD-2"):
        assert rules[rule]["status"] == "pass", (rule, rules[rule])
    pack = _row_tests(report)["test_pack_matches_reference"]
    assert not pack["rules"] and len(pack["passed_rules"]) == 7, pack
    assert [s["rules"] for s in pack["side_failures"]] == [["R-TAIL-2"]], pack


def test_a_failure_met_on_the_way_is_reported_and_fails_the_run(tmp_path: Path) -> None:
    """Padding rows one off pad_value (R-ROW-2), judged by a test that cites only sharding,
    real rows and position ids: the zigzag test judges its own rules to the end (R-SHARD-2
    passes), reports R-ROW-2 failed with its input, and pytest fails it."""
    report = run_suite("fake_targets:PaddingOffByOneTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py::test_zigzag_matches_reference")
    rules = report["rules"]
    assert rules["R-SHARD-2"]["status"] == "pass", rules["R-SHARD-2"]
    assert rules["R-ROW-2"]["status"] == "fail", rules["R-ROW-2"]
    assert rules["R-ROW-2"]["failures"][0]["counterexamples"][0].startswith("case=PackCase(")
    assert [f["rules"] for f in report["findings"]] == [["R-ROW-2"]], report["findings"]
    assert "1 failed" in report["_stdout"], report["_stdout"][-2000:]


def test_a_failure_met_on_the_way_is_shrunk(tmp_path: Path) -> None:
    """Padding rows wrong only from four sequences on (R-ROW-2), met by the zigzag test, which
    does not cite R-ROW-2: the report gives the input hypothesis shrinks that failure to alone
    (four sequences, one token between them), not the first one the search met."""
    report = run_suite("fake_targets:ManySequencesPaddingTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py::test_zigzag_matches_reference",
                       profile="ci")
    side = [s for t in report["tests"] for s in t.get("side_failures", [])]
    assert [s["rules"] for s in side] == [["R-ROW-2"]], side
    found = re.search(r"lengths=(\([^)]*\)), trail=\(\)", side[0]["input"])
    assert found, side
    lengths = ast.literal_eval(found.group(1))
    assert len(lengths) == 4 and sum(lengths) == 1, side
