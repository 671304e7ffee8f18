"""No clean verdict by omission: glue hands a dtype over as produced, a crash is a failure, two
rules met by one test are two findings, and an adapter that refuses what it declared is told
which feature."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .runner import HERE, ROOT, run_suite

CONTRACT = "thd_packing/conformance/test_contract.py"
DIFFERENTIAL = "thd_packing/conformance/test_differential.py"


def test_float_ids_through_the_shared_glue_fail(tmp_path: Path) -> None:
    """A token-id packer whose ids come back float32 on some batches fails R-CONSUMER-16
    through peers/_tokens.py (which refuses them as an embedding lookup would), with the
    smallest such batch, and the pack's other rules are still judged (R-CONSUMER-17 passes)."""
    report = run_suite("fake_verdicts:FloatIdsTokenTarget", tmp_path,
                       f"{CONTRACT}::test_contract_integer_dtypes", profile="ci")
    row = report["rules"]["R-CONSUMER-16"]
    assert row["status"] == "fail", row
    assert "float32" in row["failures"][0]["message"], row["failures"]
    assert any("R-CONSUMER-16" in f["rules"] and "lengths=(3,)" in f["input"]
               for f in report["findings"]), report["findings"]
    assert report["rules"]["R-CONSUMER-17"]["status"] == "pass", report["rules"]["R-CONSUMER-17"]


def _crash_report(tmp_path: Path, target: str, profile: str = "ci") -> dict:
    return run_suite(target, tmp_path, f"{CONTRACT}::test_contract_buffer",
                     f"{CONTRACT}::test_contract_tokens", profile=profile)


def test_a_crash_counts_as_failed(tmp_path: Path) -> None:
    """A packer that crashes on a valid batch fails R-CONSUMER-17 (counted in the report's
    failed rules and its findings), the rules the crash kept from being judged are blocked by
    it, the crash keeps its traceback, and the verdict is not "clean"."""
    report = _crash_report(tmp_path, "fake_verdicts:CrashesOnLongTarget")
    assert report["rules"]["R-CONSUMER-17"]["status"] == "fail", report["rules"]["R-CONSUMER-17"]
    assert report["summary"]["fail"] >= 1 and report["test_summary"]["crashed"] >= 1
    assert any(f["rules"] == ["R-CONSUMER-17"] for f in report["findings"]), report["findings"]
    assert report["crashes"] and "R-CONSUMER-7" in report["crashes"][0]["rules"]
    assert any("IndexError" in tb for e in report["target_errors"] for tb in e["tracebacks"])
    assert not report["verdict"].startswith("clean"), report["verdict"]
    assert "rules failed" in report["verdict"] and "crashed" in report["verdict"]


def test_a_library_not_implemented_error_is_a_crash(tmp_path: Path) -> None:
    """A NotImplementedError subclass raised deep in the packer (pyarrow's
    ArrowNotImplementedError) is a crash (R-CONSUMER-17), not "rejected a valid input"
    (R-IN-1, R-IN-3) nor a declined feature."""
    report = _crash_report(tmp_path, "fake_verdicts:DeepNotImplementedTarget")
    assert report["rules"]["R-CONSUMER-17"]["status"] == "fail", report["rules"]["R-CONSUMER-17"]
    assert report["rules"]["R-IN-1"]["status"] != "fail", report["rules"]["R-IN-1"]
    assert not report["declined"], report["declined"]


def test_a_clean_run_says_clean(tmp_path: Path) -> None:
    """The reference on the same tests: nothing failed, nothing crashed, nothing blocked."""
    report = _crash_report(tmp_path, "reference", "dev")
    assert report["verdict"].startswith("clean;"), report["verdict"]


def test_two_rules_in_one_test_are_two_findings(tmp_path: Path) -> None:
    """One test, two rules broken on different inputs from the same line of the same check
    (a total not a multiple of M, R-TOTAL-2; one M too large, R-TOTAL-4): each is reported
    and shrunk on its own, with its own smallest input."""
    report = run_suite("fake_verdicts:TwoTotalRulesTarget", tmp_path,
                       f"{DIFFERENTIAL}::test_plan_bucket_matches_reference", profile="ci")
    rules = report["rules"]
    assert rules["R-TOTAL-2"]["status"] == "fail", rules["R-TOTAL-2"]
    assert rules["R-TOTAL-4"]["status"] == "fail", rules["R-TOTAL-4"]
    found = {tuple(f["rules"]): f["input"] for f in report["findings"]}
    assert ("R-TOTAL-2",) in found and ("R-TOTAL-4",) in found, found
    assert found[("R-TOTAL-2",)] != found[("R-TOTAL-4",)]


def _usage_error(target: str, test: str, tmp_path: Path) -> str:
    cmd = [sys.executable, "-m", "pytest", test, "--target", f"fake_verdicts:{target}",
           "--report-dir", str(tmp_path), "-q", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out[-3000:]
    assert "usage error" in out, out[-3000:]
    return out


def test_not_declared_for_a_declared_feature_is_a_usage_error(tmp_path: Path) -> None:
    """An adapter that declares `bucket` and raises NotDeclared for it stops the run with a
    usage error naming the feature and the adapter's reason, not a stream of failures; so does
    an optional method that raises it, called by a test directly."""
    out = _usage_error("RefusesDeclaredBucketTarget",
                       f"{DIFFERENTIAL}::test_plan_bucket_matches_reference", tmp_path)
    assert "declared features it used: bucket" in out and "this packer has no bucket" in out, \
        out[-3000:]
    out = _usage_error("RefusesItsUnpackTarget", f"{CONTRACT}::test_contract_unpack", tmp_path)
    assert "this packer cannot unpack" in out, out[-3000:]


def test_pad_value_checks_can_be_declined(tmp_path: Path) -> None:
    """A packer that declares pad_value and leaves its checks to its callers (validated_elsewhere
    "pad_value") has the pad-value rejection rows declined, not failed (R-ERR-1, R-ERR-10); the
    rows of values it must accept still run."""
    report = run_suite("fake_verdicts:LenientPadTarget", tmp_path,
                       "thd_packing/conformance/test_rejections.py", "-k", "pad_value")
    pads = [t for t in report["tests"] if "-pad_value=" in t["test"]]
    assert pads and {t["status"] for t in pads} == {"declined", "pass"}, \
        [t for t in pads if t["status"] not in ("declined", "pass")][:3]
    assert any(t["status"] == "pass" for t in pads)
    assert report["rules"]["R-ERR-10"]["status"] != "fail", report["rules"]["R-ERR-10"]
    assert "pad_value_checks" in report["declined"], report["declined"]


def test_seq_align_none_is_judged_by_a_property(tmp_path: Path) -> None:
    """A packer that declares seq_align='none' with another tail than the worked example's
    and aligns its sequences anyway fails R-ALIGN-6 on a drawn case, not "declined"."""
    report = run_suite("fake_verdicts:AlignsDespiteNoneTarget", tmp_path,
                       f"{DIFFERENTIAL}::test_plan_seq_align_none_matches_reference",
                       "thd_packing/conformance/test_spec_examples.py", profile="ci")
    assert report["rules"]["R-ALIGN-6"]["status"] == "fail", report["rules"]["R-ALIGN-6"]


def test_caller_arrays_charge_a_plan_it_cannot_lay_out_to_the_plan(tmp_path: Path) -> None:
    """The caller's-arrays test judges rows on the packer's own plan; a plan the row map cannot
    lay out fails the plan's rules there, not R-ROW-1."""
    report = run_suite("fake_verdicts:WrongPlanAndRowsTarget", tmp_path,
                       "thd_packing/conformance/test_caller_arrays.py")
    assert report["rules"]["R-ROW-1"]["status"] != "fail", report["rules"]["R-ROW-1"]
    failed = {r for r, row in report["rules"].items() if row["status"] == "fail"}
    assert failed and all(r.startswith(("R-ALIGN-", "R-TOTAL-", "R-META-")) for r in failed), \
        failed
