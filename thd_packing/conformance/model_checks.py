"""The model tier's verdicts (spec §12c): every rank's run against the sequences run alone.

Plain data in (`model.Baseline`, one `model.RankRun` per rank, the shards and the batch); a
failure is a `RuleViolation` naming the first token, in batch order, whose log-probs or label
differ: its sequence and offset, the rank and row that hold it, and the metadata the consumer
read there. Gradients are named by parameter and entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .model import TOL, Baseline, RankRun, Shard, Slots, bounds_of, every_slots, real_lengths
from .under_test import RuleViolation


def consumer_rule(consumer: str, cp: int) -> str:
    """R-MODEL-1 position ids (cp = 1), R-MODEL-2 THD metadata (cp = 1), R-MODEL-3 CP."""
    if cp > 1:
        return "R-MODEL-3"
    return "R-MODEL-1" if consumer == "position_ids" else "R-MODEL-2"


def _close(got: np.ndarray | float, want: np.ndarray | float) -> np.ndarray:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return np.abs(got - want) <= TOL * np.maximum(1.0, np.abs(want))


def _over(got: float, want: float) -> str:
    """How far a difference is over the tier's one tolerance, in words."""
    allowed = TOL * max(1.0, abs(want))
    return (f"{abs(got - want) / allowed:.3g} times the tolerance {TOL:g} x max(1, |unpacked|)"
            f" = {allowed:.3g}")


def describe(shards: Sequence[Shard], slots: Sequence[Slots], rank: int, row: int,
             consumer: str) -> str:
    """The metadata the consumer read at rank `rank` row `row`."""
    meta = shards[rank].meta
    bounds = bounds_of(meta)
    k, o = int(slots[rank].seg[row]), int(slots[rank].off[row])
    if k < 0:
        return f"rank {rank} row {row}: read as no slot of cu_seqlens_padded"
    given = meta.get("cu_seqlens") is not None and len(meta["cu_seqlens"]) == len(bounds)
    real = (f"real length {int(real_lengths(meta)[k])} from cu_seqlens" if given
            else "no cu_seqlens: the whole segment is attended")
    pos = shards[rank].pos
    where = (f"position id {int(np.asarray(pos).reshape(-1)[row])}"
             if consumer != "thd" and pos is not None else f"RoPE position {o} (its offset)")
    return (f"rank {rank} row {row}: segment {k} offset {o} of cu_seqlens_padded "
            f"[{int(bounds[k])}, {int(bounds[k + 1])}), {real}, {where}")


def _reader(slots: Sequence[Slots], lengths: Sequence[int]
            ) -> dict[tuple[int, int], tuple[int, int]]:
    """(sequence, offset) -> (rank, row) of every real slot some rank reads."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    b = len(lengths)
    for rank, s in enumerate(slots):
        for row in np.flatnonzero((s.seg >= 0) & (s.seg < b)).tolist():
            i, j = int(s.seg[row]), int(s.off[row])
            if j < lengths[i]:
                out.setdefault((i, j), (rank, row))
    return out


def _sources(seqs: Sequence[np.ndarray], value: int, not_in: int) -> str:
    hits = [(i, int(j)) for i, s in enumerate(seqs) if i != not_in
            for j in np.flatnonzero(s == value)[:2]]
    if not hits:
        return ""
    shown = ", ".join(f"token {j} of sequence {i}" for i, j in hits[:3])
    return f" (id {value} is {shown}: a label from another sequence?)"


def check_runs(base: Baseline, runs: Sequence[RankRun], shards: Sequence[Shard],
               seqs: Sequence[np.ndarray], cp: int, layout: str, consumer: str) -> None:
    """R-MODEL-1..3 (log-probs of every real token), R-MODEL-4 (each label the loss reads and
    the loss), R-MODEL-5 (gradients summed over the ranks)."""
    rule = consumer_rule(consumer, cp)
    lengths = [len(s) for s in seqs]
    slots = every_slots(shards[0].meta, cp, layout, len(shards[0].rows))
    reader = _reader(slots, lengths)
    what = f"consumer {consumer!r}, cp {cp} {layout}"
    for i, length in enumerate(lengths):
        for j in range(length):
            if (i, j) not in reader:
                raise RuleViolation(
                    f"{what}: token {j} of sequence {i} is read by no rank: TE's partition of "
                    f"the target's cu_seqlens_padded {bounds_of(shards[0].meta).tolist()[:12]} "
                    "puts no row at that slot", {rule})
            rank, row = reader[(i, j)]
            got, want = runs[rank].logp[row], base.logp[i][j]
            if not _close(got, want).all():
                raise RuleViolation(
                    f"{what}: sequence {i} token {j}: log-probs differ from the sequence run "
                    f"alone by {np.max(np.abs(got - want)):.3g} (tolerance {TOL:g} x "
                    f"max(1, |unpacked|)) "
                    f"({describe(shards, slots, rank, row, consumer)}; token id "
                    f"{int(np.asarray(shards[rank].rows).reshape(-1)[row])}, the batch's "
                    f"{int(seqs[i][j])})", {rule})
    _check_labels(base, runs, shards, seqs, slots, reader, what, consumer)
    loss = sum(run.loss for run in runs)
    if not _close(loss, base.loss):
        raise RuleViolation(f"{what}: packed loss {loss!r} (summed over ranks, divided by "
                            f"{runs[0].count} label tokens), unpacked {base.loss!r}: they "
                            f"differ by {abs(loss - base.loss):.3g}, {_over(loss, base.loss)}",
                            {"R-MODEL-4"})
    _check_grads(base, runs, what)


def _check_labels(base: Baseline, runs: Sequence[RankRun], shards: Sequence[Shard],
                  seqs: Sequence[np.ndarray], slots: Sequence[Slots],
                  reader: dict[tuple[int, int], tuple[int, int]], what: str,
                  consumer: str) -> None:
    lengths = [len(s) for s in seqs]
    labelled = {key for key in reader if key[1] < lengths[key[0]] - 1}
    for (i, j) in sorted(reader):
        rank, row = reader[(i, j)]
        run = runs[rank]
        where = describe(shards, slots, rank, row, consumer)
        if (i, j) not in labelled:
            if run.mask[row]:
                label = int(run.labels[row])
                raise RuleViolation(
                    f"{what}: the loss reads a label at sequence {i} token {j}, its last, "
                    f"which has no next token: label id {label}{_sources(seqs, label, i)} "
                    f"({where})", {"R-MODEL-4"})
            continue
        want_id = int(seqs[i][j + 1])
        if not run.mask[row]:
            raise RuleViolation(f"{what}: the label of sequence {i} token {j} (token {j + 1}) "
                                f"is never read by the loss ({where})", {"R-MODEL-4"})
        got = run.label_logp[row]
        if not _close(got, base.logp[i][j, want_id]):
            label = int(run.labels[row])
            raise RuleViolation(
                f"{what}: sequence {i} token {j}: the loss reads label id {label}, the next "
                f"token is id {want_id}{_sources(seqs, label, i) if label != want_id else ''}"
                f"; -log p differs by {abs(got - base.logp[i][j, want_id]):.3g} ({where})",
                {"R-MODEL-4"})
    for rank, (run, s) in enumerate(zip(runs, slots, strict=True)):
        extra = [row for row in np.flatnonzero(run.mask).tolist()
                 if not (0 <= s.seg[row] < len(lengths) and s.off[row] < lengths[s.seg[row]] - 1)]
        if extra:
            row = extra[0]
            raise RuleViolation(f"{what}: the loss reads a label at a padding row "
                                f"({describe(shards, slots, rank, row, consumer)}): label id "
                                f"{int(run.labels[row])}", {"R-MODEL-4"})


def _check_grads(base: Baseline, runs: Sequence[RankRun], what: str) -> None:
    summed = [run.grads for run in runs if run.grads is not None]
    if len(summed) != 1:
        raise RuleViolation(f"{what}: {len(summed)} ranks returned gradients, expected rank 0's "
                            "sum over the group", {"R-MODEL-5"})
    grads = summed[0]
    for name, want in base.grads.items():
        got = grads[name]
        bad = np.flatnonzero(~_close(got, want).reshape(-1))
        if bad.size:
            e = int(bad[0])
            g, w = float(got.reshape(-1)[e]), float(want.reshape(-1)[e])
            raise RuleViolation(
                f"{what}: gradient of {name} differs from the unpacked run at entry "
                f"{tuple(int(k) for k in np.unravel_index(e, want.shape))}: {g!r} vs {w!r}, by "
                f"{abs(g - w):.3g}, {_over(g, w)} ({bad.size} entries differ)", {"R-MODEL-5"})
