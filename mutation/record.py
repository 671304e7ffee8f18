"""The mutation record (RECORD.md) and the run's summary (summary.json), read back and checked.

RECORD.md files every surviving mutant of impl/ under a group, `## Equivalent: ...` (no input
of the public API tells it apart), `## Unreachable: ...` (only an input this CPU machine
cannot make tells it apart) or `## Open: ...` (no verdict yet, and why), with the group's
argument in prose and, per mutant, its name and its diff. `regenerate()` rebuilds every
mutant's diff from impl/ with mutmut's own generator, so a test can tell when a recorded name
no longer is the mutant the argument is about.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "mutation" / "RECORD.md"
SUMMARY = ROOT / "mutation" / "summary.json"
VERDICTS = ("Equivalent", "Unreachable", "Open")
# impl/check_vendored.py checks a user's copy; the suite never calls it, so it is not mutated.
NOT_MUTATED = ("check_vendored.py",)


@dataclass(frozen=True)
class Entry:
    name: str  # mutmut's name, e.g. impl.pack.x_pack_thd__mutmut_3
    verdict: str  # one of VERDICTS
    group: str  # the heading's title
    diff: str  # the changed lines, "-old" then "+new"


def read_record(path: Path = RECORD) -> list[Entry]:
    """Every mutant RECORD.md lists, with its group's verdict and its stored diff."""
    entries: list[Entry] = []
    verdict = group = name = ""
    diff: list[str] | None = None
    for line in path.read_text().splitlines():
        if diff is not None:
            if line.strip() == "```":
                entries.append(Entry(name, verdict, group, "\n".join(diff)))
                diff = None
            else:
                diff.append(line[2:] if line.startswith("  ") else line)
            continue
        heading = re.match(r"## (\w+): (.+)$", line)
        if heading:
            verdict, group = heading.groups()
            if verdict not in VERDICTS:
                raise ValueError(f"RECORD.md: unknown verdict {verdict!r} in {line!r}")
            continue
        item = re.match(r"- `(impl\.[^`]+__mutmut_\d+)`", line)
        if item:
            name = item.group(1)
        elif line.strip() == "```diff" and name:
            diff = []
    return entries


def mutant_diff(original: str, mutant: str) -> str:
    """The changed lines of one function, without context or line numbers."""
    lines = difflib.unified_diff(original.splitlines(), mutant.splitlines(), n=0, lineterm="")
    return "\n".join(line for line in lines
                     if line[:1] in "-+" and not line.startswith(("---", "+++")))


@contextlib.contextmanager
def _mutmut_config(root: Path) -> Iterator[None]:
    """mutmut reads its configuration from the working directory's setup.cfg."""
    from mutmut import configuration

    old = Path.cwd()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "setup.cfg").write_text("[mutmut]\nsource_paths = impl/\n")
        (Path(tmp) / "impl").symlink_to(root / "impl")
        os.chdir(tmp)
        configuration.reset_config()
        try:
            yield
        finally:
            os.chdir(old)
            configuration.reset_config()


def regenerate(root: Path = ROOT) -> dict[str, str]:
    """Every mutant of impl/ that mutmut generates today: name -> diff."""
    from mutmut.mutation.file_mutation import mutate_file_contents

    found: dict[str, str] = {}
    with _mutmut_config(root), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in sorted((root / "impl").glob("*.py")):
            if path.name in NOT_MUTATED:
                continue
            mutated = mutate_file_contents(f"impl/{path.name}", path.read_text())
            lines = mutated.code.splitlines()
            spans = mutated.line_span_by_function_name
            for mutant in mutated.mutant_names:
                function = function_of(mutant)
                orig, new = (spans[name] for name in (f"{function}__mutmut_orig", mutant))
                found[f"impl.{path.stem}.{mutant}"] = mutant_diff(
                    "\n".join(lines[orig.start:orig.end]).replace("__mutmut_orig", "", 1),
                    "\n".join(lines[new.start:new.end]).replace(mutant, function, 1))
    return found


def renumbered(entries: list[Entry], mutants: dict[str, str]) -> dict[str, str | None]:
    """For each entry whose name no longer has its stored diff (impl edited, mutmut renumbered
    the function's mutants): the one mutant of the same function that has it now, or None
    (gone, or several share that diff: file it again by hand)."""
    out: dict[str, str | None] = {}
    for e in entries:
        if mutants.get(e.name) == e.diff:
            continue
        same = [n for n, d in mutants.items()
                if d == e.diff and function_of(n) == function_of(e.name)]
        out[e.name] = same[0] if len(same) == 1 else None
    return out


def rename(text: str, mapping: dict[str, str]) -> str:
    """RECORD.md's text with each listed `old` name replaced by its new one, in one pass."""
    return re.sub(r"(?m)^- `(impl\.[^`]+__mutmut_\d+)`",
                  lambda m: f"- `{mapping.get(m.group(1), m.group(1))}`", text)


def function_of(name: str) -> str:
    """The mutated function a mutant name belongs to: impl.pack.x_f__mutmut_1 -> impl.pack.x_f."""
    return re.sub(r"__mutmut_\d+$", "", name)


def file_of(name: str) -> str:
    """The impl file a mutant name belongs to: impl.pack.x_f__mutmut_1 -> impl/pack.py."""
    return "impl/" + name.split(".")[1] + ".py"


def per_file(names: list[str] | dict[str, str]) -> dict[str, int]:
    """How many of `names` each impl file holds."""
    counts: dict[str, int] = {}
    for name in names:
        counts[file_of(name)] = counts.get(file_of(name), 0) + 1
    return counts


def read_summary(path: Path = SUMMARY) -> dict:
    return json.loads(path.read_text())


def table(summary: dict, entries: list[Entry]) -> str:
    """The record's per-file table: mutants, killed, each verdict, left (not killed, no verdict
    yet), not checked (a run stopped before them), and the kill rates of the checked ones."""
    not_killed, unchecked = set(summary["not_killed"]), set(summary.get("not_checked", []))
    files = summary["mutants_per_file"]
    rows = ["| file | mutants | killed | equivalent | unreachable | left | not checked | raw | "
            "without equivalent |", "|---|---|---|---|---|---|---|---|---|"]
    for file in [*sorted(files), "all"]:
        scope = {n for n in not_killed | unchecked | {e.name for e in entries}
                 if file in ("all", file_of(n))}
        filed = [e for e in entries if e.name in scope and e.verdict != "Open"]
        equivalent = sum(e.verdict == "Equivalent" for e in filed)
        left = len((not_killed & scope) - {e.name for e in filed})
        skipped = len(unchecked & scope)
        mutants = sum(files.values()) if file == "all" else files[file]
        checked = mutants - skipped
        killed = checked - len(filed) - left
        numbers = [mutants, killed, equivalent, len(filed) - equivalent, left, skipped]
        raw = killed / checked if checked else 1.0
        without = killed / (checked - equivalent) if checked > equivalent else 1.0
        label = f"**{file}**" if file == "all" else file
        rows.append(f"| {label} | " + " | ".join(f"{n:,}" for n in numbers)
                    + f" | {raw:.1%} | {without:.1%} |")
    return "\n".join(rows)


if __name__ == "__main__":
    # `python -m mutation.record`: rename the records whose mutants mutmut renumbered, and list
    # those it cannot place (their mutant is gone or ambiguous).
    moved = renumbered(read_record(), regenerate())
    RECORD.write_text(rename(RECORD.read_text(), {o: n for o, n in moved.items() if n}))
    for old_name, new_name in sorted(moved.items()):
        print(f"{old_name} -> {new_name or 'NOT FOUND: file it again'}")
