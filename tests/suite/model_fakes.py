"""Packers with one bug each that only a consumer notices, for the model tier's own tests
(tests/suite/test_model_tier.py). Each wraps the literal reference and changes one thing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from thd_packing import reference
from thd_packing.conformance.targets.reference import ReferenceTarget


def _parts(result: Any) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    if isinstance(result, tuple):
        return result[0], result[1], dict(result[2])
    return result.rows, result.position_ids, dict(result.meta)


def _edited(result: Any, rows: np.ndarray, pos: np.ndarray, meta: dict[str, Any]) -> Any:
    """The pack with rows, position ids and meta replaced, in the shape the protocol returns."""
    if isinstance(result, tuple):
        return rows, pos, meta
    return dataclasses.replace(result, rows=rows, position_ids=pos, meta=meta)


class NoRestartTarget(ReferenceTarget):
    """Position ids that count on over the rank's rows instead of restarting per sequence."""

    name = "no-restart"
    description = "tests/suite: position ids 0..n-1 over the whole rank"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Any:
        result = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        rows, pos, meta = _parts(result)
        return _edited(result, rows, np.arange(len(pos), dtype=pos.dtype), meta)


class EarlyBoundaryTarget(ReferenceTarget):
    """cu_seqlens_padded with every inner boundary one row early (and no real cu_seqlens): the
    previous segment's last row becomes the first row of the next, so a sequence's first token
    attends to the previous sequence's last token (rows and position ids unchanged)."""

    name = "early-boundary"
    description = "tests/suite: every inner segment boundary one row early"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Any:
        result = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        rows, pos, meta = _parts(result)
        bounds = np.asarray(meta["cu_seqlens_padded"]).copy()
        for k in range(1, len(bounds) - 1):
            if bounds[k] > bounds[k - 1]:
                bounds[k] -= 1
        meta["cu_seqlens_padded"] = bounds
        meta.pop("cu_seqlens", None)
        return _edited(result, rows, pos, meta)


class CpAlignedZigzagTarget(ReferenceTarget):
    """Zigzag CP with every sequence padded to a multiple of cp instead of 2 * cp (the zigzag
    factor forgotten): each segment is cut into 2 * cp chunks of Q // (2 * cp) rows, so a
    segment's last Q mod 2 * cp rows are on no rank; each rank's rows are filled up with
    padding to T / cp. Other configs are the reference's."""

    name = "cp-aligned-zigzag"
    description = "tests/suite: zigzag segments aligned to cp, not 2 * cp"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Any:
        result = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        cp = int(config.get("cp_size", 1))
        if cp == 1 or config.get("cp_layout", "zigzag") != "zigzag":
            return result
        _, _, meta = _parts(result)
        lengths = [len(s) for s in seqs]
        padded = [-(-n // cp) * cp for n in lengths]
        bounds = np.concatenate([[0], np.cumsum(padded)]).astype(np.int64)
        total = int(bounds[-1])
        values, offsets = [], []
        for seq, n, p in zip(seqs, lengths, padded, strict=True):
            src = np.roll(np.asarray(seq), -1) if need_roll else np.asarray(seq)
            values.append(np.concatenate([src, np.full(p - n, pad_value, dtype=src.dtype)]))
            offsets.append(np.arange(p))
        buffer = np.concatenate(values) if values else np.zeros(0, dtype=np.int64)
        position = np.concatenate(offsets) if offsets else np.zeros(0, dtype=np.int64)
        rows: list[int] = []
        for k, q in enumerate(padded):
            chunk = q // (2 * cp)
            for index in (cp_rank, 2 * cp - 1 - cp_rank):
                rows.extend(range(int(bounds[k]) + index * chunk,
                                  int(bounds[k]) + (index + 1) * chunk))
        n_local = total // cp
        fill = n_local - len(rows)
        local = np.concatenate([buffer[rows], np.full(fill, pad_value, dtype=buffer.dtype)])
        pos = np.concatenate([position[rows], np.zeros(fill, dtype=np.int64)])
        meta.update(seqlens=np.asarray(lengths, dtype=np.int32),
                    seqlens_padded=np.asarray(padded, dtype=np.int32),
                    cu_seqlens=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32),
                    cu_seqlens_padded=bounds.astype(np.int32), total=total,
                    local_rows=n_local, max_seqlen=max(padded, default=0))
        return _edited(result, local, pos, meta)


class CrossingLabelTarget(ReferenceTarget):
    """need_roll labels of a packer that rolls the batch as one stream with every sequence one
    token short (boundaries from cu_seqlens minus one): the label of a sequence's second-to-last
    token is the next non-empty sequence's first token."""

    name = "crossing-label"
    description = "tests/suite: the label before a sequence's last crosses into the next"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Any:
        result = super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
        if not need_roll:
            return result
        rows, pos, meta = _parts(result)
        rows = rows.copy()
        cfg = reference.PackConfig(**config)
        plan = reference.plan_thd([len(s) for s in seqs], cfg)
        nonempty = [i for i, s in enumerate(seqs) if len(s)]
        following = {a: b for a, b in zip(nonempty, nonempty[1:], strict=False)}
        for k, src in enumerate(reference.row_map(plan, cfg, cp_rank)):
            i = src.seq
            if i in following and len(seqs[i]) >= 2 and src.offset == len(seqs[i]) - 2:
                rows[k] = seqs[following[i]][0]
        return _edited(result, rows, pos, meta)


class FlatRollMaskTarget(ReferenceTarget):
    """With need_roll, labels beside the inputs from one flat roll of the rank's buffer
    (verl #6475) and a loss mask that keeps every real row: a sequence's last token gets the
    next row, the next sequence's first token, as its label, and the mask lets the loss read
    it."""

    name = "flat-roll-mask"
    description = "tests/suite: flat-rolled labels with a loss mask over every real row"

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Any:
        from thd_packing.conformance.protocol import Packed

        got = super().pack(seqs, config, cp_rank, need_roll=False, pad_value=pad_value)
        if not need_roll:
            return got
        cfg = reference.PackConfig(**config)
        plan = reference.plan_thd([len(s) for s in seqs], cfg)
        real = np.asarray([src.seq < len(seqs) and src.offset < len(seqs[src.seq])
                           for src in reference.row_map(plan, cfg, cp_rank)], dtype=bool)
        return Packed(got.rows, got.position_ids, got.meta, np.roll(got.rows, -1), real)
