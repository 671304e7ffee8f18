"""A convention that depends on the layout (slime: seq_align 'cp' under zigzag, 'none' under
contiguous) is declared as a dict keyed by layout, and the suite draws each layout with its
own value."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings

from thd_packing.conformance import strategies as s
from thd_packing.conformance.protocol import Declared, capabilities, problems

from .runner import run_suite

BY_LAYOUT = {"zigzag": "cp", "contiguous": "none"}


class _Target:
    name = "t"
    declared = Declared(features=frozenset({"seq_align_cp", "seq_align_none"}),
                        convention={"seq_align": BY_LAYOUT})

    def pack(self) -> None:  # the protocol's shape only
        pass


CAPS = capabilities(_Target())


@settings(max_examples=200, deadline=None)
@given(s.configs(caps=CAPS))
def test_each_layout_is_drawn_with_its_own_value(config: dict) -> None:
    assert config["seq_align"] == BY_LAYOUT[config["cp_layout"]], config
    assert not s.declined(CAPS, config), config


def test_a_case_of_the_other_layouts_value_is_declined() -> None:
    config = {"cp_size": 2, "cp_layout": "contiguous", "seq_align": "cp"}
    assert s.declined(CAPS, config) == ["seq_align=cp@contiguous"]


def test_a_bad_per_layout_convention_is_named() -> None:
    for bad in ({"zigzag": "cp"}, {"zigzag": "cp", "contiguous": "sideways"},
                {"zigzag": "none", "contiguous": "none"}, {"ring": "cp", "contiguous": "none"}):
        target = _Target()
        target.declared = Declared(convention={"seq_align": bad})
        found = problems(target)
        assert found and "seq_align" in found[0], (bad, found)


def test_a_per_layout_packer_passes(tmp_path: Path) -> None:
    """The packer that aligns by its layout fails nothing: the suite never draws contiguous
    with seq_align='cp' for it, and both R-ALIGN-5 and R-ALIGN-6 are judged."""
    d = "thd_packing/conformance/test_differential.py"
    report = run_suite("fake_verdicts:PerLayoutAlignTarget", tmp_path,
                       f"{d}::test_plan_any_config_matches_reference",
                       f"{d}::test_plan_seq_align_cp_matches_reference",
                       f"{d}::test_plan_seq_align_none_matches_reference",
                       f"{d}::test_pack_matches_reference")
    bad = [t for t in report["tests"] if t["status"] not in ("pass", "declined", "skip")]
    assert not bad, bad
    for rule in ("R-ALIGN-5", "R-ALIGN-6"):
        assert report["rules"][rule]["status"] == "pass", (rule, report["rules"][rule])


def test_a_feature_its_fixed_convention_rules_out_is_named() -> None:
    """Declaring tail_segment with a fixed tail='last' is a usage error naming both, not a
    feature silently dropped."""
    target = _Target()
    target.declared = Declared(features=frozenset({"tail_segment"}),
                               convention={"tail": "last"})
    found = problems(target)
    assert found and "tail_segment" in found[0] and "tail='last'" in found[0], found
