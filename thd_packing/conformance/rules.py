"""Rule IDs and worked examples read from spec/ (the suite's traceability source)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
SPEC_FILE = SPEC_DIR / "thd-packing.md"
_RULE = re.compile(r"^\s*-\s+\*\*(R-[A-Z0-9]+-\d+)\*\*:?\s*(.*)$")
_EXAMPLE = re.compile(r"```example\n(.*?)```", re.DOTALL)


# The rules that speak only under one feature (the spec's "With `fp8`", "With
# `tail="segment"`", "Where the target can unpack"): a target without it has them declined
# whatever its tests did, unless one failed, since a test that passes without the feature
# judged nothing of them (the minimal-total test cites R-FP8-1 for every target).
UNDER_FEATURE: dict[str, str | tuple[str, ...]] = {
    # FP8: verl's fp8=True or a recipe name; either is the feature
    "R-FP8-1": ("fp8", "fp8_recipes"), "R-TOTAL-1": ("fp8", "fp8_recipes"),
    "R-CONSUMER-5": ("fp8", "fp8_recipes"),
    "R-TAIL-1": "tail_segment", "R-TAIL-2": "tail_segment",
    "R-TAIL-3": "tail_tokens", "R-TAIL-4": "tail_tokens",
    "R-TOTAL-7": "fixed_total", "R-ALIGN-6": "seq_align_none",
    "R-STATIC-1": "static_metadata", "R-STATIC-2": "static_metadata",
    "R-STATIC-3": "static_metadata",
    "R-ROLL-1": "need_roll", "R-ROLL-2": "need_roll", "R-ROLL-3": "need_roll",
    "R-CONSUMER-11": "need_roll",
    "R-LABEL-1": "labels_ignore", "R-LABEL-2": "labels_ignore", "R-CONSUMER-15": "labels_ignore",
    "R-LABEL-3": "loss_mask", "R-CONSUMER-13": "unpack",
}


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


def suite_rules(roles: tuple[str, ...] = ("pack", "bin")) -> dict[str, str]:
    """The rules the suite judges of a target with these roles: a packer's ("pack"), every
    spec rule but section 1a's (R-DEV-*: where a device API keeps its outputs and which values
    it reads, checked by impl's own tests on torch's `meta` device, tests/impl/test_devices.py)
    and the bin step's; a binner's or balancer's ("bin"), the bin step's (R-BIN-*,
    spec/bins.md)."""
    out = {}
    for rule, text in spec_rules().items():
        binning = rule.startswith("R-BIN-")
        if rule.startswith("R-DEV-") or ("bin" if binning else "pack") not in roles:
            continue
        out[rule] = text
    return out


def _rule_key(rule: str) -> tuple[str, int]:
    group, _, number = rule[2:].rpartition("-")
    return group, int(number)


def spec_examples() -> list[dict[str, Any]]:
    """The JSON `example` blocks of the spec (section 13)."""
    return [json.loads(block) for block in _EXAMPLE.findall(SPEC_FILE.read_text())]


def _constants(nodes: list[ast.expr]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.Tuple | ast.List):
            out.extend(_constants(node.elts))
    return out


def cited_rules(paths: Iterable[Path]) -> dict[str, set[str]]:
    """Rule ID -> the test files citing it in @pytest.mark.rules(...) or a `rules=` argument
    (as test_contract.py's registered checks take), read statically so the answer does not
    depend on which tests were selected."""
    cited: dict[str, set[str]] = {}
    for path in sorted(paths):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            found = [k.value for k in node.keywords if k.arg == "rules"]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "rules":
                found += node.args
            for rule in _constants(found):
                cited.setdefault(rule, set()).add(path.name)
    return cited
