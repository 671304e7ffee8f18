"""The report leads with the findings: each failing input once, with every rule it breaks."""

from __future__ import annotations

from conformance import report

CASE = "Falsifying example: {}(\n    case=PackCase(config={{'cp_size': 2}}, lengths=(4,)),\n)"


def entry(test: str, status: str, rules: list[str], example: str | None,
          message: str = "RuleViolation: wrong", **extra: object) -> dict[str, object]:
    return {"test": f"conformance/test_x.py::{test}", "status": status, "rules": rules,
            "message": message, "counterexamples": [example] if example else [], **extra}


ENTRIES = [
    entry("test_a", "fail", ["R-TOTAL-4"], CASE.format("test_a")),
    entry("test_b", "fail", ["R-ALIGN-3", "R-CONSUMER-2"], CASE.format("test_b")),
    entry("test_c", "fail", ["R-ROW-1"], "Falsifying example: test_c(\n    # The test always "
          "failed when commented parts were varied together.\n    lengths=[0, 0, 1],  # or any "
          "other generated value\n)"),
    entry("test_d[cp2]", "fail", ["R-ERR-5"], None),
    entry("test_e", "target-error", [], "Falsifying example: test_e(\n    lengths=[0],\n)",
          message="TargetError: pack crashed: IndexError", blocked_rules=["R-CONSUMER-7"]),
    entry("test_f", "declined", [], None, declined=["fp8"],
          reason="declined capability 'fp8': target 'x': config fp8=True"),
    entry("test_g", "pass", ["R-POS-1"], None),
]


def test_one_input_breaking_several_rules_is_one_finding() -> None:
    found = report.findings(ENTRIES, "fail")
    assert [f["input"] for f in found] == ["[cp2]", "lengths=[0, 0, 1]",
                                           "case=PackCase(config={'cp_size': 2}, lengths=(4,))"]
    shared = found[-1]
    assert shared["rules"] == ["R-ALIGN-3", "R-CONSUMER-2", "R-TOTAL-4"]
    assert len(shared["tests"]) == 2


def test_crashes_and_declines_are_listed_apart() -> None:
    crashes = report.findings(ENTRIES, "target-error")
    assert [(c["input"], c["rules"]) for c in crashes] == [("lengths=[0]", ["R-CONSUMER-7"])]
    assert report.declined_reasons(ENTRIES) == {"fp8": "config fp8=True"}


def test_markdown_opens_with_the_findings() -> None:
    matrix = report.fold(ENTRIES, {"R-TOTAL-4": "t", "R-POS-1": "p"})
    header = {"target": "x", "name": "x", "description": "d", "spec_version": "1",
              "hypothesis_profile": "dev"}
    text = report.markdown(report.payload(ENTRIES, matrix, header), matrix)
    order = [text.index(h) for h in ("## Findings (3)", "## Target errors (1)",
                                      "**Declined**", "## Rule matrix")]
    assert order == sorted(order), text
