"""Glue shared by the token-id packers (transformers, TRL, torchtune, VeOmni).

Those packers move token ids, not rows: their caller tokenizes before and looks the ids up in
an embedding table after. The suite's rows can be any dtype and trailing shape, so the glue
plays both parts: `Vocabulary` gives every row of the batch its own id (the pad token is id 0,
whose row holds `pad_value`) and turns the packer's ids back into rows. A packer that drops,
duplicates or reorders an id shows it in the rows it gets back, as it would in the embeddings.

`shift_labels` is the shift every HF-style causal loss applies to the unshifted `labels` these
packers return (transformers/loss/loss_utils.py `ForCausalLMLoss`, lines 63-66: pad one
`ignore_index` on the right, drop the first): what the loss reads at row k is the label of
row k + 1.

The glue converts nothing: ids and labels are read in the dtype the packer produced, and an
embedding lookup or a cross entropy refuses floating ids (`nn.Embedding`, `F.cross_entropy`),
so ids that are not integers are refused here as there (`refuse_output`, R-CONSUMER-16).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thd_packing.conformance.protocol import NotDeclared, refuse_output

PAD_ID = 0
IGNORE_INDEX = -100


class Vocabulary:
    """The batch's rows as token ids 1..S in batch order, and the pad token 0."""

    def __init__(self, seqs: list[np.ndarray], pad_value: Any) -> None:
        arrays = [np.asarray(s) for s in seqs]
        if not arrays:
            raise ValueError("seqs: an empty batch has no dtype to build rows of")
        self.dtype = arrays[0].dtype
        self.trail = arrays[0].shape[1:]
        pad = np.full((1, *self.trail), pad_value, dtype=self.dtype)
        self.table = np.concatenate([pad, *arrays])
        starts = np.cumsum([1] + [a.shape[0] for a in arrays])
        self.ids = [list(range(int(start), int(start) + a.shape[0]))
                    for start, a in zip(starts, arrays, strict=False)]

    def rows(self, ids: Any) -> np.ndarray:
        """The rows of token ids (the embedding lookup); an id outside the table is an error."""
        idx = integer_ids(ids, "token ids").reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self.table)):
            raise IndexError(f"token id outside the batch's vocabulary: {idx.min()}..{idx.max()}")
        return self.table[idx]

    def label_rows(self, label_ids: Any, ignore_index: int) -> np.ndarray:
        """Label ids as rows: `ignore_index` (in the rows' dtype) where the label is ignored."""
        idx = integer_ids(label_ids, "label ids").reshape(-1)
        ignored = idx == IGNORE_INDEX
        out = self.rows(np.where(ignored, PAD_ID, idx))
        out[ignored] = np.asarray(ignore_index).astype(self.dtype)
        return out


def integer_ids(ids: Any, what: str) -> np.ndarray:
    """`ids` as the packer made them, refused unless integers (what an embedding lookup or a
    cross entropy takes, R-CONSUMER-16): the refusal is reported first (`refuse_output`), and
    only then are the values read as int64, so the pack's other rules are still judged."""
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu":
        refuse_output(f"the packer's {what} are {arr.dtype}, not integers: an embedding lookup "
                      "and a cross entropy refuse them", "R-CONSUMER-16")
        return arr.astype(np.int64)
    return arr


def shift_labels(labels: Any) -> np.ndarray:
    """The labels the loss reads at each row (ForCausalLMLoss: pad right, drop the first), in
    the packer's own integer dtype."""
    flat = integer_ids(labels, "labels").reshape(-1)
    if not flat.size:
        return flat
    return np.concatenate([flat[1:], np.asarray([IGNORE_INDEX], dtype=flat.dtype)])


def refuse_undeclared(config: dict[str, Any], who: str, supports: tuple[str, ...] = ()) -> None:
    """Glue guard: parallelism, and a config field the packer has no counterpart for (those
    not in `supports`), raise NotDeclared naming it. The suite never asks a target for
    a feature it does not declare, so reaching here says loudly which one was asked."""
    if config.get("tp_size", 1) != 1 or config.get("cp_size", 1) != 1:
        raise NotDeclared(f"{who} has no tensor or context parallelism of its own")
    for key in ("fp8", "bucket", "min_local_rows", "fixed_total", "max_num_seqs"):
        if key not in supports and config.get(key) not in (None, False):
            raise NotDeclared(f"{key}={config[key]!r}: {who} has none")
    if config.get("max_seqlen", "exact") != "exact":
        raise NotDeclared(f"max_seqlen={config['max_seqlen']!r}: {who} has none")

