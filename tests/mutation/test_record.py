"""The mutation record agrees with impl/ and with the committed run: every recorded mutant still
has the diff its argument is about (regenerated with mutmut's own generator), every mutant the
run did not kill is filed exactly once, and RECORD.md's table is the summary's."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutation.record import (
    RECORD,
    Entry,
    mutant_diff,
    per_file,
    read_record,
    read_summary,
    regenerate,
    rename,
    renumbered,
    table,
)


@pytest.fixture(scope="module")
def mutants() -> dict[str, str]:
    return regenerate()


def test_read_record_takes_groups_names_and_diffs(tmp_path: Path) -> None:
    md = tmp_path / "RECORD.md"
    md.write_text(
        "# title\n\n- `impl.pack.x_f__mutmut_9` outside any group is ignored\n\n"
        "## Equivalent: same rows\n\nwhy\n\n- `impl.pack.x_f__mutmut_1`\n  ```diff\n"
        "  -    a = 1\n  +    a = 2\n  ```\n\n## Unreachable: CUDA only\n\n"
        "- `impl.config.xǁCǁ__init____mutmut_7`\n  ```diff\n  -x\n  +y\n  ```\n")
    assert read_record(md) == [
        Entry("impl.pack.x_f__mutmut_1", "Equivalent", "same rows", "-    a = 1\n+    a = 2"),
        Entry("impl.config.xǁCǁ__init____mutmut_7", "Unreachable", "CUDA only", "-x\n+y"),
    ]
    md.write_text("## Probably: fine\n")
    with pytest.raises(ValueError, match="Probably"):
        read_record(md)


def test_mutant_diff_keeps_only_the_changed_lines() -> None:
    original = "def f(a):\n    b = a + 1\n    return b\n"
    assert mutant_diff(original, original.replace("+ 1", "- 1")) == (
        "-    b = a + 1\n+    b = a - 1")


def test_every_recorded_mutant_still_has_its_diff(mutants: dict[str, str]) -> None:
    """A recorded name whose mutant changed (impl edited, mutmut renumbered) fails here."""
    stale = [(e.name, e.diff, mutants.get(e.name)) for e in read_record()
             if mutants.get(e.name) != e.diff]
    assert not stale, f"{len(stale)} records no longer match their mutant; first: {stale[0]}"


def test_summary_is_of_todays_impl(mutants: dict[str, str]) -> None:
    assert read_summary()["mutants_per_file"] == per_file(mutants)


def test_record_files_every_mutant_the_run_did_not_kill() -> None:
    names = [e.name for e in read_record()]
    assert len(names) == len(set(names)), "a mutant filed twice"
    not_killed = set(read_summary()["not_killed"])
    assert not_killed - set(names) == set(), "not killed and not filed"
    assert set(names) - not_killed == set(), "filed but killed by the run"


def test_record_table_is_the_summarys() -> None:
    assert table(read_summary(), read_record()) in RECORD.read_text()


def test_the_runners_pytest_command_collects(tmp_path: Path) -> None:
    """mutmut runs the suite and tests/impl/ in one pytest command (mutation/run.py's SETUP_CFG):
    it must collect both, or every mutant goes unchecked."""
    import configparser
    import subprocess
    import sys

    from mutation import run

    cfg = configparser.ConfigParser()
    cfg.read_string(run.SETUP_CFG)
    selection = cfg["mutmut"]["pytest_add_cli_args_test_selection"].split()
    args = [a for a in cfg["mutmut"]["pytest_add_cli_args"].split()
            if not a.startswith("--report-dir")]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *selection, *args,
         f"--report-dir={tmp_path}"],
        cwd=run.ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = proc.stdout.splitlines()
    assert any(t.startswith("thd_packing/conformance/") for t in collected)
    assert any(t.startswith("tests/impl/") for t in collected)


def test_renumbered_records_follow_their_diff() -> None:
    entries = [Entry("impl.pack.x_f__mutmut_2", "Equivalent", "g", "-a\n+b"),
               Entry("impl.pack.x_f__mutmut_3", "Equivalent", "g", "-c\n+d"),
               Entry("impl.pack.x_g__mutmut_1", "Open", "h", "-e\n+f")]
    now = {"impl.pack.x_f__mutmut_1": "-z\n+y", "impl.pack.x_f__mutmut_3": "-a\n+b",
           "impl.pack.x_f__mutmut_4": "-c\n+d", "impl.pack.x_h__mutmut_1": "-e\n+f"}
    moved = renumbered(entries, now)
    # x_g's mutant is gone (another function's same diff does not count)
    assert moved == {"impl.pack.x_f__mutmut_2": "impl.pack.x_f__mutmut_3",
                     "impl.pack.x_f__mutmut_3": "impl.pack.x_f__mutmut_4",
                     "impl.pack.x_g__mutmut_1": None}
    text = "- `impl.pack.x_f__mutmut_2`\n- `impl.pack.x_f__mutmut_3`\n"
    assert rename(text, {k: v for k, v in moved.items() if v}) == (
        "- `impl.pack.x_f__mutmut_3`\n- `impl.pack.x_f__mutmut_4`\n")
