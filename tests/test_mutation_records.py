"""conformance/mutation.py reads EQUIVALENT_MUTANTS.md back: the names it excuses are the ones
the file lists, tier by tier (no mutmut run here)."""

from __future__ import annotations

from pathlib import Path

from conformance.mutation import recorded_groups


def test_recorded_groups_parse_table_cells(tmp_path: Path) -> None:
    """Only table rows count, per `## ` tier; a cell lists a function and its mutant numbers."""
    md = tmp_path / "EQUIVALENT_MUTANTS.md"
    md.write_text(
        "# title\n\n## Equivalent (3)\n\n| group | count | why | mutants |\n|---|---|---|---|\n"
        "| a | 3 | x | `pack.x_f` 1, 12; `config.xǁCǁ__init__` 7 |\n\n"
        "## Unreachable here (1)\n\n| g | 1 | y | `unpack.x_g` 4 |\n\n"
        "## Killed after the full run (2)\n\nprose `pack.x_f` 99, 100.\n"
    )
    groups = recorded_groups(md)
    assert groups == {
        "Equivalent": {"impl.pack.x_f__mutmut_1", "impl.pack.x_f__mutmut_12",
                       "impl.config.xǁCǁ__init____mutmut_7"},
        "Unreachable here": {"impl.unpack.x_g__mutmut_4"},
    }


def test_committed_record_has_disjoint_tiers() -> None:
    """The committed file lists equivalent and unreachable mutants, none in both tiers."""
    groups = recorded_groups()
    assert set(groups) == {"Equivalent", "Unreachable through the protocol or on this machine"}
    equivalent, unreachable = groups.values()
    assert equivalent and unreachable and not equivalent & unreachable
