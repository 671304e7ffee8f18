"""Bad input to verl's mask entry points (spec section 12, R-MEG-8, R-MEG-9; section 11): a mask
that is not a bool `[B, S]` tensor, an output that is not `[1, local_rows, *trail]`, and
PackedSeqParams whose offsets do not fit the mask (capabilities `packed_seqs` and
`megatron_checks`: the adapter's own validation, which verl 0.9.1 lacks, erratum E-10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import reference

from . import harness as h

CONFIG: dict[str, Any] = {"tp_size": 2}  # alignment 2: the padded offsets differ from the real ones
LENGTHS = (3, 5)
SEQ_LEN = 6


def _case() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(values [B, S], mask [B, S] right-padded, rows [1, local_rows], cu_seqlens_padded)."""
    mask = np.zeros((len(LENGTHS), SEQ_LEN), dtype=bool)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = True
    values = (np.arange(mask.size, dtype=np.float32) + 1).reshape(mask.shape)
    cfg = reference.PackConfig(**CONFIG)
    rows, _, plan = reference.pack_thd([values[i][mask[i]] for i in range(len(LENGTHS))], cfg, 0)
    return values, mask, rows[None], np.asarray(plan.cu_seqlens_padded)


def _bad_masks(mask: np.ndarray) -> dict[str, tuple[np.ndarray, type[Exception]]]:
    return {"int64": (mask.astype(np.int64), TypeError),
            "uint8": (mask.astype(np.uint8), TypeError),
            "float32": (mask.astype(np.float32), TypeError),
            "short": (np.ascontiguousarray(mask[:, :-1]), ValueError),
            "extra-row": (np.concatenate([mask, mask[:1]]), ValueError),
            "1-D": (np.ascontiguousarray(mask[0]), ValueError),
            "3-D": (np.ascontiguousarray(mask[..., None]), ValueError)}


def _outcome_unchanged(what: str, inputs: list[np.ndarray], call: Callable[[], Any],
                       rule: str) -> BaseException | None:
    """The exception `call` raised (None if it returned), once it is shown to have left
    `inputs` unchanged (R-IN-6 through the adapter's rule)."""
    before = h.snapshot(inputs)
    got = h.outcome(call)
    if h.snapshot(inputs) != before:
        raise h.RuleViolation(f"{what} changed its inputs", {rule})
    return got


def _expect(what: str, got: BaseException | None, cls: type[Exception], field: str,
            rule: str) -> None:
    if not isinstance(got, cls):
        raise h.RuleViolation(f"{what}: expected {cls.__name__}, got {got!r}", {rule})
    if not h._names(field, str(got)):
        raise h.RuleViolation(f"{what}: the message {str(got)!r} does not name {field}", {rule})


@h.needs("packed_seqs", "megatron_checks")
@pytest.mark.rules("R-MEG-8", "R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("kind", ["int64", "uint8", "float32", "short", "extra-row", "1-D", "3-D"])
def test_preprocess_rejects_mask(kind: str) -> None:
    """preprocess_packed_seqs with a mask that is not bool (TypeError) or not `[B, S]` of
    input_ids (ValueError): the message names attention_mask; the inputs are left unchanged."""
    values, mask, _, _ = _case()
    bad, cls = _bad_masks(mask)[kind]
    what = f"preprocess_packed_seqs with a {kind} mask"
    got = _outcome_unchanged(what, [values, bad], lambda: h.target().packed_preprocess(
        values, bad, dict(CONFIG), 0), "R-MEG-8")
    _expect(what, got, cls, "attention_mask", "R-MEG-8")


@h.needs("packed_seqs", "megatron_checks")
@pytest.mark.rules("R-MEG-9", "R-ERR-1", "R-ERR-9")
@pytest.mark.parametrize("kind", ["int64", "uint8", "float32", "short", "extra-row", "1-D", "3-D"])
def test_postprocess_rejects_mask(kind: str) -> None:
    """postprocess_packed_seqs with a mask that is not a bool `[batch_size, seq_len]` tensor:
    the message names attention_mask (batch_size and seq_len are the good mask's)."""
    _, mask, rows, cu = _case()
    bad, cls = _bad_masks(mask)[kind]
    what = f"postprocess_packed_seqs with a {kind} mask"
    got = _outcome_unchanged(what, [rows, bad], lambda: h.target().packed_postprocess(
        rows, cu, bad, dict(CONFIG), batch_size=mask.shape[0], seq_len=mask.shape[1]),
        "R-MEG-9")
    _expect(what, got, cls, "attention_mask", "R-MEG-9")


@h.needs("packed_seqs", "megatron_checks")
@pytest.mark.rules("R-MEG-9", "R-ERR-11")
@pytest.mark.parametrize("shape", ["no-batch-dim", "batch-2", "rows-short", "rows-long",
                                   "scalar"])
def test_postprocess_rejects_output_shape(shape: str) -> None:
    """An output that is not `[1, local_rows, *trail]` raises ValueError naming output (or the
    shards it is cut into, R-ERR-11) and is left unchanged."""
    _, mask, rows, cu = _case()
    output = {"no-batch-dim": rows[0], "batch-2": np.concatenate([rows, rows]),
              "rows-short": rows[:, :-2], "rows-long": np.concatenate([rows, rows], axis=1),
              "scalar": np.array(1.0, np.float32)}[shape]
    output = np.ascontiguousarray(output)
    before = output.tobytes()
    got = h.outcome(lambda: h.target().packed_postprocess(output, cu, mask, dict(CONFIG)))
    if output.tobytes() != before:
        raise h.RuleViolation("postprocess_packed_seqs changed its output argument",
                              {"R-MEG-9"})
    if not isinstance(got, ValueError):
        raise h.RuleViolation(f"postprocess_packed_seqs of an output of shape {output.shape}: "
                              f"expected ValueError, got {got!r}", {"R-ERR-11"})
    if not h._names("output", str(got)) and not h._names("shards", str(got)):
        raise h.RuleViolation(f"postprocess_packed_seqs of an output of shape {output.shape}: "
                              f"the message {str(got)!r} names neither output nor shards",
                              {"R-ERR-11"})


def _cu_variants(cu: np.ndarray) -> dict[str, tuple[Any, type[Exception] | None]]:
    """cu_seqlens_q_padded replacements: (array, the class expected; None: an entry count
    that contradicts batch_size, a ValueError that must also show the count)."""
    return {"one-more": (np.append(cu, cu[-1]).astype(np.int32), None),
            "one-less": (cu[:-1].copy(), None),
            "2-D": (cu[None].copy(), ValueError),
            "float": (cu.astype(np.float32), TypeError)}


@h.needs("packed_seqs", "megatron_checks")
@pytest.mark.rules("R-MEG-9", "R-ERR-11")
@pytest.mark.parametrize("kind", ["one-more", "one-less", "2-D", "float"])
def test_postprocess_rejects_cu_seqlens(kind: str) -> None:
    """A cu_seqlens_q_padded that is not a 1-D integer array of batch_size + 1 offsets (a
    forged PackedSeqParams) raises an error naming cu_seqlens_q_padded (with the entry count it
    has, where that is the fault), before anything is gathered."""
    _, mask, rows, cu = _case()
    bad, cls = _cu_variants(cu)[kind]
    got = h.outcome(lambda: h.target().packed_postprocess(
        rows, cu, mask, dict(CONFIG), params={"cu_seqlens_q_padded": bad}))
    what = f"postprocess_packed_seqs with a {kind} cu_seqlens_q_padded"
    if cls is None:
        _expect(what, got, ValueError, "cu_seqlens_q_padded", "R-ERR-11")
        if not h.names_number(len(bad), str(got)):
            raise h.RuleViolation(f"{what}: the message {str(got)!r} does not show its "
                                  f"{len(bad)} entries", {"R-ERR-11"})
    else:
        _expect(what, got, cls, "cu_seqlens_q_padded", "R-ERR-11")


@h.needs("packed_seqs", "megatron_checks")
@pytest.mark.rules("R-MEG-9", "R-ERR-11")
def test_postprocess_rejects_indivisible_total() -> None:
    """PackedSeqParams whose padded total is not divisible by cp_size (a forged plan): ValueError
    naming cp_size and the total, before gathering."""
    mask = np.array([[True, True, True, False]])
    shards = [np.zeros(2, np.float32), np.ones(2, np.float32)]
    cu = np.array([0, 5], np.int32)
    got = h.outcome(lambda: h.target().packed_gathered(shards, cu, mask, {"cp_size": 2}, 0))
    _expect("postprocess_packed_seqs with padded total 5 and cp_size 2", got, ValueError,
            "cp_size", "R-ERR-11")
    if not h.names_number(5, str(got)):
        raise h.RuleViolation(f"padded total 5, cp_size 2: the message {str(got)!r} does not "
                              "show the total 5", {"R-ERR-11"})
