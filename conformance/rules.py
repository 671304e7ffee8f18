"""Rule IDs and worked examples read from spec/ (the suite's traceability source)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
SPEC_FILE = SPEC_DIR / "thd-packing.md"
_RULE = re.compile(r"^\s*-\s+\*\*(R-[A-Z0-9]+-\d+)\*\*:?\s*(.*)$")
_EXAMPLE = re.compile(r"```example\n(.*?)```", re.DOTALL)


def spec_version() -> str:
    version = SPEC_DIR / "VERSION"
    return version.read_text().strip() if version.is_file() else "unknown"


def spec_rules() -> dict[str, str]:
    """Every normative rule ID in spec/*.md with its first line; withdrawn rules left out."""
    rules: dict[str, str] = {}
    for path in sorted(SPEC_DIR.glob("*.md")):
        for line in path.read_text().splitlines():
            match = _RULE.match(line)
            if match and "withdrawn" not in match.group(2).lower()[:40]:
                rules.setdefault(match.group(1), match.group(2).strip())
    return dict(sorted(rules.items(), key=lambda kv: _rule_key(kv[0])))


def _rule_key(rule: str) -> tuple[str, int]:
    group, _, number = rule[2:].rpartition("-")
    return group, int(number)


def spec_examples() -> list[dict[str, Any]]:
    """The JSON `example` blocks of the spec (section 13)."""
    return [json.loads(block) for block in _EXAMPLE.findall(SPEC_FILE.read_text())]
