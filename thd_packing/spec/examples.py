"""Parse the spec's rule IDs and executable worked examples (spec/thd-packing.md §13).

Shared by the reference tests and the conformance suite, so that both run the same examples.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).resolve().parent
SPEC_FILE = SPEC_DIR / "thd-packing.md"
BINS_FILE = SPEC_DIR / "bins.md"  # the bin step (spec 2.0)
ERRATA_FILE = SPEC_DIR / "errata.md"
VECTORS_DIR = SPEC_DIR / "vectors"
SPEC_VERSION = (SPEC_DIR / "VERSION").read_text().strip()

RULE_DEFINITION = re.compile(r"^- \*\*(R-[A-Z][A-Z0-9]*-[0-9]+)\*\*", re.MULTILINE)
RULE_ID = re.compile(r"R-[A-Z][A-Z0-9]*-[0-9]+")  # groups may hold digits: R-FP8-1
EXAMPLE_BLOCK = re.compile(r"^```example\n(.*?)^```", re.MULTILINE | re.DOTALL)
BINS_BLOCK = re.compile(r"^```bins\n(.*?)^```", re.MULTILINE | re.DOTALL)


def rule_ids(text: str | None = None) -> list[str]:
    """Every rule the spec defines, in document order (the pack step, then the bin step)."""
    source = SPEC_FILE.read_text() + BINS_FILE.read_text() if text is None else text
    return RULE_DEFINITION.findall(source)


def bin_examples() -> list[dict[str, Any]]:
    """Every ```bins block of spec/bins.md (B8), parsed from JSON."""
    return [json.loads(block) for block in BINS_BLOCK.findall(BINS_FILE.read_text())]


def examples() -> list[dict[str, Any]]:
    """Every ```example block, parsed from JSON."""
    return [json.loads(block) for block in EXAMPLE_BLOCK.findall(SPEC_FILE.read_text())]


def canonical_values(seqlens: list[int]) -> list[list[int]]:
    """Token j of sequence i is 1000 * (i + 1) + j, so every value names its source."""
    return [[1000 * (i + 1) + j for j in range(length)] for i, length in enumerate(seqlens)]


def vector_files() -> list[Path]:
    return sorted(VECTORS_DIR.glob("*.json"))
