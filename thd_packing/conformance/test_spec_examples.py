"""The spec's worked examples (section 13), run against the target.

Values are canonical (token j of sequence i is 1000 * (i + 1) + j); `null` marks an
unspecified slot, which is not compared.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from thd_packing.reference import segments_from_position_ids

from .protocol import zero_length_of
from .rules import spec_examples
from .running import call_target, readable_output, valid_input_rules
from .under_test import RuleViolation, decline, require, require_config, target

EXAMPLES = spec_examples()
ERRORS: dict[str, type[Exception]] = {"TypeError": TypeError, "ValueError": ValueError,
                                      "RuntimeError": RuntimeError,
                                      "NotImplementedError": NotImplementedError}


def _canonical(seqlens: list[int]) -> list[np.ndarray]:
    return [np.arange(n, dtype=np.int64) + 1000 * (i + 1) for i, n in enumerate(seqlens)]


# R-IN-3: the 1.1.0 fields' defaults. An example that spells one out means what leaving it out
# means, so it is left out for the target: a 1.0 target need not know the field's name.
DEFAULTS_1_1: dict[str, Any] = {"tail": "last", "seq_align": "tp_cp", "max_num_seqs": None,
                                "max_seqlen": "exact", "fixed_total": None, "labels": "roll",
                                "ignore_index": -100}


# The rejections of PackConfig fields, which only a target that validates its config makes.
CONFIG_CHECK_RULES = {"R-ERR-1", "R-ERR-2", "R-ERR-3", "R-ERR-4", "R-ERR-12", "R-ERR-14"}


def _without_defaults(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items()
            if not (key in DEFAULTS_1_1 and type(value) is type(DEFAULTS_1_1[key])
                    and value == DEFAULTS_1_1[key])}


def _params() -> list[Any]:
    return [pytest.param(ex, id=ex["name"], marks=pytest.mark.rules(*ex["rules"]))
            for ex in EXAMPLES]


@pytest.mark.parametrize("example", _params())
def test_spec_example(example: dict[str, Any]) -> None:
    """One worked example: plan fields, rows and position ids per rank, or the error class."""
    if "engine" in example:
        require("engine")
        with pytest.raises(ERRORS[example["error"]]):
            target().resolve_engine_config(**example["engine"])
        return
    config = _without_defaults(example.get("config", {}))
    pad_value = example.get("pad_value", 0)
    # Every feature and convention value the example uses (fp8, bucket, zero lengths, labels,
    # tail, seq_align, fp8 recipes, static metadata, ...) must be declared; a target with a fixed
    # convention declines the examples of another, and one that lacks a 1.1.0 field entirely
    # declines its rejections (it cannot be asked to reject what it does not know).
    require_config(config, lengths=example["seqlens"],
                   need_roll=bool(example.get("need_roll")), pad_value=pad_value)
    if "error" in example and set(example["rules"]) & CONFIG_CHECK_RULES:
        require("config_checks")  # a PackConfig field's rejection, not a plan's
    if 0 in example["seqlens"] and zero_length_of(target()) == "omit":
        decline("zero_length", "the example keeps an entry for each zero-length sequence; "
                "the target declares them omitted (R-META-8)")
    seqs = _canonical(example["seqlens"])
    cp = int(config.get("cp_size", 1)) if isinstance(config.get("cp_size", 1), int) else 1
    if "error" in example:
        with pytest.raises(ERRORS[example["error"]]):
            target().pack(seqs, dict(config), 0, pad_value=pad_value)
        return
    ids = []
    for rank in range(cp):
        what = f"{example['name']}: pack(rank {rank})"
        rows, pos, meta = readable_output(call_target(
            what, target().pack, seqs, dict(config), rank,
            need_roll=example.get("need_roll", False), pad_value=pad_value,
            rules=set(example["rules"]) | valid_input_rules()), what)
        for key, value in example.get("plan", {}).items():
            got = meta.get(key)
            if got is None:
                continue  # a target that does not report the field (verl: cu_seqlens)
            got_list = np.asarray(got).tolist()
            if got_list != value:
                raise RuleViolation(f"{example['name']}: rank {rank} {key} = {got_list}, spec "
                                    f"{value}", field_rules(key, example["rules"]))
        for field, got_arr in (("rows", rows), ("position_ids", pos)):
            expected = example.get(field, {}).get(str(rank))
            if expected is None:
                continue
            got_l = np.asarray(got_arr).tolist()
            bad = [k for k, (g, w) in enumerate(zip(got_l, expected, strict=False))
                   if w is not None and g != w]
            if len(got_l) != len(expected) or bad:
                at = f"[{bad[0]}] = {got_l[bad[0]]}, spec {expected[bad[0]]}" if bad else \
                    f" has {len(got_l)} rows, spec {len(expected)}"
                raise RuleViolation(f"{example['name']} rank {rank} {field}{at} (all: "
                                    f"{got_l}, spec {expected})",
                                    field_rules(field, example["rules"]))
        if pos is not None:  # a packer without position ids derives no segments from them
            ids.append(np.asarray(pos))
    if "derived_cu_seqlens" in example and len(ids) == cp:  # R-PID-1, ranks in buffer order
        derived = segments_from_position_ids(np.concatenate(ids)).tolist()
        if derived != example["derived_cu_seqlens"]:
            raise RuleViolation(f"{example['name']}: position ids derive {derived}, spec "
                                f"{example['derived_cu_seqlens']}", {"R-PID-1"})


# The rules each compared field belongs to (a prefix names a family): a mismatch is charged to
# those the example is tagged with, else to the field's first rule, never to every tag (a wrong
# max_seqlen is not a wrong seqlens_padded). Plan fields are compared first, so a row or a
# position id that differs after an equal plan is a row or position fault, not an alignment.
FIELD_RULES: dict[str, tuple[str, ...]] = {
    "seqlens": ("R-META-1", "R-IN-2", "R-STATIC-1"),
    "seqlens_padded": ("R-META-1", "R-ALIGN-", "R-TOTAL-", "R-FP8-1", "R-TAIL-1", "R-STATIC-1"),
    "cu_seqlens": ("R-META-2", "R-TAIL-1", "R-STATIC-1"),
    "cu_seqlens_padded": ("R-META-3", "R-ALIGN-", "R-TOTAL-", "R-FP8-1", "R-TAIL-1",
                          "R-STATIC-1"),
    "max_seqlen": ("R-META-4", "R-STATIC-2"),
    "total": ("R-META-5", "R-TOTAL-", "R-FP8-1", "R-ALIGN-2", "R-CONSUMER-5"),
    "local_rows": ("R-META-5", "R-TOTAL-", "R-FP8-1", "R-CONSUMER-5"),
    "num_seqs": ("R-META-7", "R-TAIL-1", "R-STATIC-1"),
    "rows": ("R-ROW-", "R-SHARD-", "R-ROLL-1", "R-ROLL-2", "R-ROLL-3", "R-IN-2", "R-TAIL-1",
             "R-LABEL-"),
    "position_ids": ("R-POS-", "R-TAIL-2", "R-ROLL-1", "R-ROLL-3", "R-SHARD-", "R-PID-"),
}


def _belongs(rule: str, family: str) -> bool:
    return rule.startswith(family) if family.endswith("-") else rule == family


def field_rules(field: str, tagged: list[str]) -> set[str]:
    """The rules a mismatch of `field` disproves among the example's tags (FIELD_RULES; a
    field it does not list: every tag)."""
    families = FIELD_RULES.get(field)
    if families is None:
        return set(tagged)
    charged = {r for r in tagged if any(_belongs(r, f) for f in families)}
    return charged or {families[0]}
