"""The suite is crash-robust: a target error on the degenerate batches is reported with its
input, and never stops the other checks from judging the inputs that do not hit it; a batch of
only empty sequences, mishandled, fails its named cases alone."""

from __future__ import annotations

from pathlib import Path

from .runner import run_suite

CONTRACT = tuple(f"R-CONSUMER-{k}" for k in range(1, 14))


def _judged(report: dict, rules: tuple[str, ...]) -> dict[str, str]:
    """The status of each rule that was not judged (blocked, untested): {} when all were."""
    return {r: report["rules"][r]["status"] for r in rules
            if report["rules"][r]["status"] not in ("pass", "fail")}


def _degenerate_errors(report: dict) -> list[dict]:
    return [e for e in report["target_errors"]
            if "test_contract_degenerate[all-empty" in e["test"] and e["counterexamples"]]


def test_crash_and_dropped_empty_sequence_both_reported(tmp_path: Path) -> None:
    """A packer that crashes on the all-empty batch and drops trailing zero-length sequences on
    other inputs: the crash is a target error on the named all-empty case, the drop is
    R-CONSUMER-7 on the draws that exclude the degenerate batches, and every other contract
    rule is judged (passes) instead of being blocked by the crash."""
    report = run_suite("fake_targets:EmptyBatchBugsTarget", tmp_path,
                       "thd_packing/conformance/test_contract.py")
    assert _degenerate_errors(report), report["target_errors"]
    failed = {t["test"].split("::")[-1]: t for t in report["tests"] if t["status"] == "fail"}
    assert "R-CONSUMER-7" in failed["test_contract_tokens_nondegenerate"]["rules"], failed
    assert report["rules"]["R-CONSUMER-7"]["status"] == "fail"
    assert not _judged(report, CONTRACT), _judged(report, CONTRACT)
    others = set(CONTRACT) - {"R-CONSUMER-7", "R-CONSUMER-13"}
    assert all(report["rules"][r]["status"] == "pass" for r in others), \
        {r: report["rules"][r]["status"] for r in others}


def test_all_empty_batch_mishandled_blocks_no_other_rule(tmp_path: Path) -> None:
    """A packer that keeps zero-length sequences but packs a batch of only empty ones as nothing
    (as torchtune's PackedDataset does): the failure shows on the named all-empty cases of the
    differential, contract and mask-form tests (and the contract's pinned all-empty examples),
    hypothesis shrinks no other property to that batch, and no rule is left blocked by it."""
    report = run_suite("fake_targets:PacksNothingForAllEmptyTarget", tmp_path,
                       "thd_packing/conformance/test_differential.py",
                       "thd_packing/conformance/test_invariants.py",
                       "thd_packing/conformance/test_minimal_total.py",
                       "thd_packing/conformance/test_contract.py",
                       "thd_packing/conformance/test_mask_form.py")
    bad = {t["test"].split("::")[-1] for t in report["tests"]
           if t["status"] not in ("pass", "declined", "skip")}
    named = {"test_all_empty_batch_matches_reference[all-empty]",
             "test_all_empty_batch_matches_reference[all-empty-3]",
             "test_contract_degenerate[all-empty]", "test_contract_degenerate[all-empty-3]",
             "test_mask_form_all_empty_matches_reference[all-empty-S0]",
             "test_mask_form_all_empty_matches_reference[all-empty-S8]",
             "test_mask_form_all_empty_matches_reference[all-empty-S13-F]"}
    assert named <= bad, bad
    assert "test_mask_form_matches_reference" not in bad, bad
    # besides the named cases, only the contract's "any" draws, which pin an all-empty batch
    others = {name for name in bad - named
              if not name.startswith("test_contract") or name.endswith(("_nondegenerate",
                                                                          "_nonempty"))}
    assert not others, others
    rules = report["rules"]
    blocked = {r: row["blocked_by"] for r, row in rules.items() if row["status"] == "blocked"}
    assert not blocked, blocked
    for rule in ("R-ALIGN-1", "R-META-2", "R-META-4", "R-TOTAL-4", "R-SHARD-2", "R-ROW-1",
                 "R-POS-2", "R-IN-2", "R-ROW-3"):
        assert rules[rule]["status"] == "pass", (rule, rules[rule])


def test_rows_per_rank_break_shows_past_an_empty_batch_crash(tmp_path: Path) -> None:
    """A packer that reports one rank's rows as its total and crashes on the all-empty batch:
    R-CONSUMER-1 and R-SHARD-4 are reported, the crash is a target error with its input, and
    the contract rules the wrong total does not touch (tp and FP8 splits, tokens, positions,
    labels, leaks) are judged, not blocked."""
    report = run_suite("fake_targets:RowsPerRankTarget",
                       tmp_path, "thd_packing/conformance/test_contract.py",
                       "thd_packing/conformance/test_invariants.py::test_every_token_exactly_once",
                       "thd_packing/conformance/test_invariants.py::"
                       "test_every_token_exactly_once_nondegenerate")
    rules = report["rules"]
    assert rules["R-CONSUMER-1"]["status"] == "fail", rules["R-CONSUMER-1"]
    assert rules["R-SHARD-4"]["status"] == "fail", rules["R-SHARD-4"]
    assert _degenerate_errors(report), report["target_errors"]
    spared = ("R-CONSUMER-4", "R-CONSUMER-5", "R-CONSUMER-6", "R-CONSUMER-7", "R-CONSUMER-10",
              "R-CONSUMER-11", "R-CONSUMER-12")
    assert all(rules[r]["status"] == "pass" for r in spared), \
        {r: rules[r]["status"] for r in spared}


def test_fp8_at_many_ranks_is_drawn(tmp_path: Path) -> None:
    """A packer whose FP8 total is too small from tp * cp = 16 on fails R-CONSUMER-5: the
    contract draws weight tp * cp up to 64 with every recipe, and pin such cases."""
    report = run_suite("fake_targets:NarrowFp8Target", tmp_path,
                       "thd_packing/conformance/test_contract.py::test_contract_fp8_split")
    assert report["rules"]["R-CONSUMER-5"]["status"] == "fail", report["rules"]["R-CONSUMER-5"]
