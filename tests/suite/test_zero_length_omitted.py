"""A declared zero-length-omitted convention (spec R-META-8) reaches every tier that counts
segments: the differential tier's reference, the invariants' entry counts, the plan and the
model tier's sequences read B' non-empty sequences for B, so an omitting packer passes, and one
that declares the convention but keeps empty sequences fails. The batch of only empty sequences
is such a packer's degenerate case: the contract tier's named cases alone give it one."""

from __future__ import annotations

from pathlib import Path

import pytest

from .runner import run_suite

TESTS = ("thd_packing/conformance/test_differential.py::test_zero_length_sequences_match_reference",
         "thd_packing/conformance/test_differential.py::test_plan_only_large_lengths_match_reference",
         "thd_packing/conformance/test_invariants.py::test_alignment_and_smallest_total")
MODEL_TESTS = ("thd_packing/conformance/test_model.py::test_model_thd",
               "thd_packing/conformance/test_model.py::test_model_context_parallel")


def _statuses(report: dict) -> dict[str, str]:
    return {t["test"].split("::")[-1]: t["status"] for t in report["tests"]}


def test_an_omitting_packer_passes(tmp_path: Path) -> None:
    report = run_suite("fake_declarations:OmittingTarget", tmp_path, *TESTS)
    statuses = _statuses(report)
    assert set(statuses.values()) == {"pass"}, statuses
    assert statuses["test_zero_length_sequences_match_reference"] == "pass"


@pytest.mark.slow  # a model world: `nox -s slow`
def test_an_omitting_packer_passes_through_the_model(tmp_path: Path) -> None:
    report = run_suite("fake_declarations:OmittingTarget", tmp_path, *MODEL_TESTS)
    statuses = _statuses(report)
    assert statuses and set(statuses.values()) == {"pass"}, statuses
    assert statuses["test_model_thd"] == "pass"


def test_keeping_empty_sequences_under_a_declared_omit_fails(tmp_path: Path) -> None:
    report = run_suite("fake_declarations:KeepsButDeclaresOmitTarget", tmp_path, *TESTS)
    statuses = _statuses(report)
    assert statuses["test_zero_length_sequences_match_reference"] == "fail", statuses
    assert report["rules"]["R-META-1"]["status"] == "fail", report["rules"]["R-META-1"]


TIERS = ("thd_packing/conformance/test_differential.py",
         "thd_packing/conformance/test_invariants.py",
         "thd_packing/conformance/test_contract.py",
         "thd_packing/conformance/test_minimal_total.py",
         "thd_packing/conformance/test_alignment_limit.py",
         "thd_packing/conformance/test_static_metadata.py",
         "thd_packing/conformance/test_spec_examples.py")


def test_a_crash_on_only_empty_sequences_is_one_finding(tmp_path: Path) -> None:
    """An omitting packer that crashes on the batch of only empty sequences (as TRL's collator
    does) gets that crash reported once per named degenerate case, as a crash (R-CONSUMER-17),
    and every other test of these tiers judges it on batches with a real token: no other
    failure."""
    report = run_suite("fake_declarations:OmitsAndCrashesOnAllEmptyTarget", tmp_path, *TIERS)
    bad = {t["test"].split("::")[-1]: (t["status"], tuple(t["rules"]), t.get("crashed"))
           for t in report["tests"] if t["status"] not in ("pass", "declined", "skip")}
    crash = ("fail", ("R-CONSUMER-17",), True)
    assert bad == {"test_contract_degenerate[all-empty]": crash,
                   "test_contract_degenerate[all-empty-3]": crash}, bad
    assert "IndexError" in report["target_errors"][0]["message"]
    passed = {rule for rule, row in report["rules"].items() if row["status"] == "pass"}
    assert {"R-META-1", "R-TOTAL-4", "R-CONSUMER-7", "R-SHARD-2"} <= passed, passed


def test_no_segment_for_only_empty_sequences_passes(tmp_path: Path) -> None:
    """An omitting packer owes a batch of only empty sequences no segment (K >= B' = 0,
    R-CONSUMER-14): an empty pack, no row and `cu_seqlens_padded = [0]`, passes every contract
    check of the named degenerate cases."""
    report = run_suite("fake_declarations:OmitsToNothingTarget", tmp_path,
                       "thd_packing/conformance/test_contract.py::test_contract_degenerate")
    statuses = _statuses(report)
    assert statuses["test_contract_degenerate[all-empty]"] == "pass", statuses
    assert statuses["test_contract_degenerate[all-empty-3]"] == "pass", statuses
    assert set(statuses.values()) == {"pass"}, statuses


def test_refusing_only_empty_sequences_by_name_passes(tmp_path: Path) -> None:
    """An omitting packer MAY reject a batch of only empty sequences as an empty batch
    (R-META-8, R-ERR-7): a ValueError naming the batch passes the named degenerate cases; one
    that does not name it is still the rejection of a valid input (R-IN-1..3)."""
    degenerate = "thd_packing/conformance/test_contract.py::test_contract_degenerate"
    named = _statuses(run_suite("fake_declarations:OmitsAndRefusesAllEmptyTarget",
                                tmp_path / "named", degenerate))
    assert set(named.values()) == {"pass"}, named
    unnamed = run_suite("fake_declarations:OmitsAndRefusesAllEmptyUnnamedTarget",
                        tmp_path / "unnamed", degenerate)
    statuses = _statuses(unnamed)
    assert statuses["test_contract_degenerate[all-empty]"] == "fail", statuses
    assert unnamed["rules"]["R-IN-1"]["status"] == "fail", unnamed["rules"]["R-IN-1"]
