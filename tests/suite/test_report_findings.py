"""The report leads with the findings: each failing input once, with every rule it breaks."""

from __future__ import annotations

from thd_packing.conformance import outcomes, report

CASE = "Falsifying example: {}(\n    case=PackCase(config={{'cp_size': 2}}, lengths=(4,)),\n)"


def entry(test: str, status: str, rules: list[str], example: str | None,
          message: str = "RuleViolation: wrong", **extra: object) -> dict[str, object]:
    return {"test": f"thd_packing/conformance/test_x.py::{test}", "status": status, "rules": rules,
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


def test_declined_rules_of_a_test_never_hide_its_failure() -> None:
    """A test that met a rank without position ids reports its position-id rules declined, but
    one its failure disproved (on another input) stays failed, and none is passed or blocked."""
    rules = frozenset({"R-POS-1", "R-POS-2"})
    why = "Skipped: declined capability 'position_ids': target 'x': returns no position ids"
    failed = entry("test_f", "fail", ["R-POS-2"], CASE.format("test_f"),
                   blocked_rules=["R-POS-1", "R-ROW-1"], blocked_by=["R-POS-2"])
    passed = entry("test_p", "pass", ["R-POS-1", "R-ROW-1"], None)
    for e in (failed, passed):
        outcomes.decline(e, rules, "position_ids", why)
    matrix = report.fold([failed, passed], {"R-POS-1": "", "R-POS-2": "", "R-ROW-1": ""})
    assert {r: row["status"] for r, row in matrix.items()} == \
        {"R-POS-1": "declined", "R-POS-2": "fail", "R-ROW-1": "pass"}, matrix
    assert matrix["R-POS-1"]["declined"] == ["position_ids"]
    assert report.declined_reasons([failed, passed]) == \
        {"position_ids": "target 'x': returns no position ids"}


def test_a_failure_met_on_the_way_joins_the_finding_of_its_rules() -> None:
    """A failure a test met on its way (not shrunk) is charged to its rules while the test's
    own rules pass; it joins the smallest finding that breaks its rules, and stands alone,
    with its input, where none does."""
    row_test = entry("test_rows", "pass", ["R-ROW-1", "R-SHARD-2"], None)
    outcomes.add_side(row_test, [
        {"rules": ["R-TOTAL-4"], "message": "total 8, spec 4 [R-TOTAL-4]",
         "input": "case=PackCase(config={'cp_size': 2}, lengths=(4, 900, 3))"},
        {"rules": ["R-ROW-2"], "message": "padding 1, spec 0 [R-ROW-2]",
         "input": "case=PackCase(config={'cp_size': 4}, lengths=(9,))"}])
    assert row_test["status"] == "fail" and row_test["rules"] == []
    found = report.findings([*ENTRIES, row_test], "fail")
    shared = next(f for f in found if f["input"].startswith("case=PackCase(config={'cp_size': 2}"))
    assert "R-TOTAL-4" in shared["rules"] and shared["tests"][-1].endswith("::test_rows")
    alone = [f for f in found if f["rules"] == ["R-ROW-2"]]
    assert [f["input"] for f in alone] == ["case=PackCase(config={'cp_size': 4}, lengths=(9,))"]
    matrix = report.fold([row_test], {"R-ROW-1": "", "R-SHARD-2": "", "R-TOTAL-4": "",
                                      "R-ROW-2": ""})
    assert {r: row["status"] for r, row in matrix.items()} == \
        {"R-ROW-1": "pass", "R-SHARD-2": "pass", "R-TOTAL-4": "fail", "R-ROW-2": "fail"}
    assert len(found) == 4, found
