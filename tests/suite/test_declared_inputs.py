"""Hand-written cases respect what a target declares: the base features it lacks and its fixed
convention reach the caller-array, NumPy-size and pad-value tests, for the target and the
reference alike, so a declared difference is never charged to a rule."""

from __future__ import annotations

from pathlib import Path

from .runner import run_suite

HAND_WRITTEN = ("thd_packing/conformance/test_caller_arrays.py",
                "thd_packing/conformance/test_numpy_sizes.py",
                "thd_packing/conformance/test_rejections.py::test_pad_value_at_the_sign_bit")


def _not_passed(report: dict) -> list[dict]:
    return [t for t in report["tests"] if t["status"] not in ("pass", "declined", "skip")]


def test_declined_base_features_and_convention(tmp_path: Path) -> None:
    """A target without tensor parallelism or zigzag, with tail='segment': no failure, and
    the NumPy sizes are judged on the cases it can take (not all declined)."""
    report = run_suite("fake_declarations:SegmentNoTpTarget", tmp_path, *HAND_WRITTEN)
    assert not _not_passed(report), _not_passed(report)
    ran = [t for t in report["tests"] if "test_numpy_integer_sizes" in t["test"]
           and t["status"] == "pass"]
    assert ran, report["tests"]


def test_pad_value_judged_on_the_targets_own_padding(tmp_path: Path) -> None:
    """seq_align='cp' packs other rows than the spec default: the pad value test judges the
    padding rows of the target's own buffer, so it passes."""
    report = run_suite("fake_targets:CpAlignTarget", tmp_path, *HAND_WRITTEN)
    assert not _not_passed(report), _not_passed(report)


def test_packed_form_draws_no_empty_row_for_a_target_without_them(tmp_path: Path) -> None:
    """A target whose packed form lacks zero-length sequences is never sent a mask row without
    a True entry: its round trip passes, and the all-empty cases are declined."""
    report = run_suite("fake_declarations:PackedNoEmptyRowsTarget", tmp_path,
                       "thd_packing/conformance/test_packed_seqs.py")
    assert not _not_passed(report), _not_passed(report)
    status = {t["test"].split("::")[-1]: t["status"] for t in report["tests"]}
    assert status["test_packed_seqs_round_trip"] == "pass", status
    assert {s for n, s in status.items() if "all_empty" in n} == {"declined"}, status


def test_packed_form_sends_no_declined_feature(tmp_path: Path) -> None:
    """A packed form without tp and FP8 is sent neither, by a drawn, pinned or named case: the
    all-empty mask at tp 1 passes, the one at tp 2 with FP8 is declined."""
    report = run_suite("fake_declarations:PackedNoTensorParallelTarget", tmp_path,
                       "thd_packing/conformance/test_packed_seqs.py")
    assert not _not_passed(report), _not_passed(report)
    status = {t["test"].split("::")[-1]: t["status"] for t in report["tests"]}
    assert status["test_packed_seqs_round_trip"] == "pass", status
    assert status["test_packed_seqs_all_empty_round_trip[all-empty]"] == "pass", status
    assert status["test_packed_seqs_all_empty_round_trip[all-empty-tp-fp8]"] == "declined", status


def test_caller_arrays_judge_rows_on_the_packers_plan(tmp_path: Path) -> None:
    """A plan one block too long with the rows right on it is the plan rules' finding: the
    caller-array test passes it, and fails the same plan with its rows reversed (R-ROW-1)."""
    caller = "thd_packing/conformance/test_caller_arrays.py"
    right = run_suite("fake_targets:PadsOneBlockMoreTarget", tmp_path / "right", caller)
    assert not _not_passed(right), _not_passed(right)
    wrong = run_suite("fake_targets:PadsMoreReversedTarget", tmp_path / "wrong", caller)
    failed = _not_passed(wrong)
    assert failed and all(t["status"] == "fail" and t["rules"] == ["R-ROW-1"]
                          for t in failed), failed
    assert "on the plan it reports" in failed[0]["message"], failed[0]
