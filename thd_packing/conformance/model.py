"""The model tier (spec §12c, R-MODEL-*): a pack through a real causal LM against the sequences
run one by one through the same model.

Plain data only: the batch (token ids), each CP rank's rows, position ids, metadata and labels
(`Shard`), and the config's cp and layout. The model is a tiny `LlamaForCausalLM` built from a
seed (no download), float64, so that any difference is a packing difference. Three consumers:

- `position_ids` (cp = 1): rows and position ids through the model's own sdpa path with no
  attention mask; transformers derives the segments from the position ids.
- `thd`: rows and the metadata through `thd_attention`, registered with transformers'
  AttentionInterface: TE's THD attention, segments from `cu_seqlens_padded`, real lengths from
  `cu_seqlens` where given, positions (RoPE) from the offset in the segment. Under CP
  (cp > 1) it gathers K and V over the process group (`gather`) and masks causally by
  global offset within each segment.
- `thd_position_ids`: the same attention with the target's position ids for RoPE.

Rows are read through TE's partition of the target's own `cu_seqlens_padded` (`consumer_slots`),
with TE's integer division, so a segment that `2 * cp` does not divide loses rows as it does on
a GPU. The checks (`check_runs`) name the first token whose log-prob, label or gradient differs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

# The tiny model: small enough that a forward and backward of a few hundred rows takes
# milliseconds on a CPU, large enough (2 layers, GQA, RoPE) that any wrong attention or
# position changes the output at 1e-3 or more.
VOCAB = 64
MODEL_CONFIG: dict[str, Any] = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, use_cache=False, attn_implementation="sdpa")
# R-MODEL: the one tolerance, |packed - unpacked| <= TOL * max(1, |unpacked|) for log-probs,
# loss and every gradient entry. float64 carries ~1e-16 relative; the packed and unpacked runs
# sum the same terms in another order (attention over a longer row, ranks summed), which
# changes results by ~1e-15 at these sizes. A packing fault (a row attending across a sequence
# boundary, a wrong RoPE position, a lost or crossing label) changes them by 1e-3 or more.
TOL = 1e-9
CONSUMERS = ("position_ids", "thd", "thd_position_ids")
ATTENTION_NAME = "thd_conformance"


@dataclass(frozen=True)
class Shard:
    """One CP rank's pack as the model reads it: token ids [n], position ids [n] (None where the
    target gives none), metadata, and the labels [n] (with need_roll: the rolled pack's rows, or
    the target's own labels) and loss mask [n] where the target gives them."""

    rows: np.ndarray
    pos: np.ndarray | None
    meta: Mapping[str, Any]
    labels: np.ndarray | None = None
    loss_mask: np.ndarray | None = None


@dataclass(frozen=True)
class Slots:
    """Where the consumer reads each local row: segment and offset, -1 where TE's partition
    reads none."""

    seg: np.ndarray
    off: np.ndarray


@dataclass
class RankRun:
    """What one rank computed: log-probs [n, V] of every local row, the label read [n] and its
    log-prob (NaN where the loss does not read the row), the loss mask used, this rank's share of
    the loss, the label-token count of the batch it was divided by, and the parameters'
    gradients (summed over the ranks; rank 0 only under CP, else None)."""

    logp: np.ndarray
    labels: np.ndarray
    label_logp: np.ndarray
    mask: np.ndarray
    loss: float
    count: int
    grads: dict[str, np.ndarray] | None


@dataclass
class Baseline:
    """The sequences run alone: log-probs [L_i, V] per sequence, the token-mean loss and the
    parameters' gradients."""

    logp: list[np.ndarray]
    loss: float
    grads: dict[str, np.ndarray]


# ----------------------------------------------------------------------------------------------
# The model and the batch


@functools.lru_cache(maxsize=2)
def build_model(seed: int = 0) -> Any:
    """The tiny LlamaForCausalLM with weights drawn from `seed` (CPU, float64, eval mode: no
    dropout). Cached: the same object for every call in a process."""
    from transformers import LlamaConfig, LlamaForCausalLM

    register_attention()
    torch.manual_seed(seed)
    config = LlamaConfig(**MODEL_CONFIG)
    return LlamaForCausalLM(config).double().eval()


def token_batch(lengths: Sequence[int], seed: int) -> list[np.ndarray]:
    """Token ids for a batch: int64 in [1, VOCAB), 0 left for padding (pad_value 0)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(1, VOCAB, size=int(n), dtype=np.int64) for n in lengths]


def _forward(model: Any, impl: str, ids: torch.Tensor, pos: torch.Tensor, **kwargs: Any) -> Any:
    model.config._attn_implementation = impl
    return model(input_ids=ids[None], position_ids=pos[None], attention_mask=None,
                 use_cache=False, **kwargs).logits[0]


def _grads(model: Any) -> dict[str, np.ndarray]:
    return {name: (p.grad.detach().numpy().copy() if p.grad is not None
                   else np.zeros(tuple(p.shape)))
            for name, p in model.named_parameters()}


def label_count(lengths: Sequence[int]) -> int:
    """Label tokens of the batch: every token but each sequence's last."""
    return sum(max(int(n) - 1, 0) for n in lengths)


def baseline(model: Any, seqs: Sequence[np.ndarray]) -> Baseline:
    """Each sequence alone (sdpa, positions 0..L-1); the loss is the mean of -log p(x[j + 1])
    over every label token of the batch."""
    model.zero_grad(set_to_none=True)
    count = max(label_count([len(s) for s in seqs]), 1)
    logps, total = [], torch.zeros((), dtype=torch.float64)
    for seq in seqs:
        if len(seq) == 0:
            logps.append(np.zeros((0, VOCAB)))
            continue
        ids = torch.from_numpy(np.asarray(seq, dtype=np.int64))
        logp = torch.log_softmax(_forward(model, "sdpa", ids, torch.arange(len(seq))), -1)
        logps.append(logp.detach().numpy())
        total = total - logp[:-1].gather(1, ids[1:, None]).sum()
    loss = total / count
    if loss.requires_grad:
        loss.backward()
    return Baseline(logps, float(loss.detach()), _grads(model))


# ----------------------------------------------------------------------------------------------
# The consumer's view of the metadata


def bounds_of(meta: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(meta["cu_seqlens_padded"], dtype=np.int64)


def real_lengths(meta: Mapping[str, Any]) -> np.ndarray:
    """Per segment, the rows TE treats as real: from `cu_seqlens` where the target gives it with
    one entry per segment (K + 1), else the whole segment (Megatron passes cu_seqlens_padded as
    both)."""
    bounds = bounds_of(meta)
    real = meta.get("cu_seqlens")
    if real is not None and len(real) == len(bounds):
        return np.diff(np.asarray(real, dtype=np.int64))
    return np.diff(bounds)


def consumer_slots(bounds: np.ndarray, cp: int, layout: str, rank: int, n: int) -> Slots:
    """The segment and offset TE reads at each of rank `rank`'s `n` rows: with cp = 1 or the
    contiguous layout the global rows [rank * n, (rank + 1) * n); zigzag, per segment k from
    local row C_k // cp, chunk `rank` then chunk `2 cp - 1 - rank` of Q_k // (2 cp) rows (TE's
    integer division: the last Q_k mod 2 cp rows of a segment are read by no rank)."""
    seg = np.full(n, -1, dtype=np.int64)
    off = np.full(n, -1, dtype=np.int64)
    segments = np.diff(bounds)
    if cp == 1 or layout == "contiguous":
        glob = np.arange(rank * n, (rank + 1) * n)
        where = np.searchsorted(bounds, glob, side="right") - 1
        ok = (glob < bounds[-1]) & (where < len(segments))
        seg[ok], off[ok] = where[ok], glob[ok] - bounds[where[ok]]
        return Slots(seg, off)
    for k, q in enumerate(segments.tolist()):
        chunk, first = q // (2 * cp), int(bounds[k]) // cp
        for part, index in enumerate((rank, 2 * cp - 1 - rank)):
            rows = np.arange(first + part * chunk, first + (part + 1) * chunk)
            rows = rows[(rows >= 0) & (rows < n)]
            seg[rows] = k
            off[rows] = index * chunk + (rows - first - part * chunk)
    return Slots(seg, off)


def every_slots(meta: Mapping[str, Any], cp: int, layout: str, n: int) -> list[Slots]:
    return [consumer_slots(bounds_of(meta), cp, layout, r, n) for r in range(cp)]


# ----------------------------------------------------------------------------------------------
# THD attention (TE's semantics), registered with transformers


@dataclass
class ThdView:
    """What `thd_attention` reads: which keys each local query may attend to ([n, cp * n]) and
    how to gather the keys of every rank (None with cp = 1)."""

    allowed: torch.Tensor
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None


def attention_mask_of(slots: list[Slots], rank: int, real: np.ndarray) -> torch.Tensor:
    """Query row t of `rank` attends to key row u of any rank when both are read in the same
    segment, u's offset is at most t's, and both lie in the segment's real part (TE: rows past
    `cu_seqlens` attend to nothing and are attended by nothing)."""
    def live(s: Slots) -> tuple[np.ndarray, np.ndarray]:
        read = s.seg >= 0
        lim = np.where(read, real[np.clip(s.seg, 0, len(real) - 1)], 0)
        return read & (s.off < lim), s.seg

    q_live, q_seg = live(slots[rank])
    k_parts = [live(s) for s in slots]
    k_live = np.concatenate([p[0] for p in k_parts])
    k_seg = np.concatenate([p[1] for p in k_parts])
    k_off = np.concatenate([s.off for s in slots])
    q_off = slots[rank].off
    allowed = ((q_seg[:, None] == k_seg[None, :]) & (k_off[None, :] <= q_off[:, None])
               & q_live[:, None] & k_live[None, :])
    return torch.from_numpy(allowed)


def thd_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: Any, scaling: float | None = None, dropout: float = 0.0,
                  thd: ThdView | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Attention over THD metadata, as TE computes it: query [1, H, n, D], key and value
    [1, Hkv, n, D] local, gathered over the CP group where `thd.gather` is set; rows that may
    attend to nothing give zeros. Returns [1, n, H, D]."""
    if thd is None:
        raise TypeError("thd_attention needs thd=ThdView(...) in the model's forward kwargs")
    if thd.gather is not None:
        key, value = thd.gather(key), thd.gather(value)
    rep = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    allowed = thd.allowed
    attends = allowed.any(-1)[:, None]
    scores = torch.where(attends, scores.masked_fill(~allowed, float("-inf")), 0.0)
    probs = torch.softmax(scores, dim=-1) * attends
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


@functools.lru_cache(maxsize=1)
def register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, thd_attention)


class _Gather(torch.autograd.Function):
    """all_gather of [1, H, n, D] along the rows, in rank order; backward sums the gradient
    over the group and keeps this rank's rows (gloo has no reduce_scatter)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, rank: int, cp: int) -> torch.Tensor:
        import torch.distributed as dist

        parts = [torch.empty_like(x) for _ in range(cp)]
        dist.all_gather(parts, x.contiguous(), group=group)
        ctx.group, ctx.rank, ctx.n = group, rank, x.shape[2]
        return torch.cat(parts, dim=2)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        import torch.distributed as dist

        grad = grads[0].contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[:, :, ctx.rank * ctx.n:(ctx.rank + 1) * ctx.n], None, None, None


def _all_sum(value: torch.Tensor, group: Any) -> torch.Tensor:
    import torch.distributed as dist

    out = value.clone()
    dist.all_reduce(out, group=group)
    return out


# ----------------------------------------------------------------------------------------------
# One rank's run


def consumer_labels(shard: Shard, slots: Slots, seqs: Sequence[np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The labels the loss reads and its mask: the target's labels where it gives them (its
    need_roll pack or its own labels), else the consumer's shift of its own batch; the target's
    loss mask where it gives one, else the real slots (i, j) with j < L_i - 1 (the consumer
    knows its lengths; spec R-ROLL-2: the last token's label slot is free)."""
    lengths = np.asarray([len(s) for s in seqs] + [0], dtype=np.int64)
    k = np.where(slots.seg >= 0, np.minimum(slots.seg, len(seqs)), len(seqs))
    mask = (slots.off >= 0) & (slots.off < lengths[k] - 1)
    if shard.loss_mask is not None:
        mask = np.asarray(shard.loss_mask).astype(bool).reshape(-1)
    if shard.labels is not None:
        labels = np.asarray(shard.labels).reshape(len(shard.rows), -1)[:, 0].astype(np.int64)
    else:
        labels = np.zeros(len(shard.rows), dtype=np.int64)
        for t in np.flatnonzero(mask):
            labels[t] = seqs[int(slots.seg[t])][int(slots.off[t]) + 1]
    return labels, mask


def run_rank(model: Any, shards: Sequence[Shard], seqs: Sequence[np.ndarray], cp: int,
             layout: str, rank: int, consumer: str, group: Any = None) -> RankRun:
    """Rank `rank`'s shard through `consumer`: log-probs of every row, this rank's share of the
    loss (its label tokens' -log p summed, divided by the label count of the whole batch, summed
    over the ranks under CP), and after backward the gradients summed over the ranks."""
    if consumer not in CONSUMERS:
        raise ValueError(f"consumer must be one of {CONSUMERS}, got {consumer!r}")
    if consumer == "position_ids" and cp != 1:
        raise ValueError("the position_ids consumer (sdpa) runs at cp = 1 only")
    shard = shards[rank]
    n = len(shard.rows)
    slots = every_slots(shard.meta, cp, layout, n)
    rows = np.asarray(shard.rows).reshape(n).astype(np.int64)
    # A row that is no token id (a padding value out of the vocabulary) enters as id 0; a real
    # slot holding one then differs from the batch and is named by the checks.
    ids = torch.from_numpy(np.where((rows >= 0) & (rows < VOCAB), rows, 0))
    if consumer == "thd":
        pos = torch.from_numpy(np.maximum(slots[rank].off, 0))
    else:
        pos = torch.from_numpy(np.asarray(shard.pos, dtype=np.int64).reshape(n))
    model.zero_grad(set_to_none=True)
    if consumer == "position_ids":
        logits = _forward(model, "sdpa", ids, pos)
    else:
        gather = None
        if cp > 1:
            def gather(x: torch.Tensor) -> torch.Tensor:
                return _Gather.apply(x, group, rank, cp)  # type: ignore[no-any-return]
        view = ThdView(attention_mask_of(slots, rank, real_lengths(shard.meta)), gather)
        logits = _forward(model, ATTENTION_NAME, ids, pos, thd=view)
    logp = torch.log_softmax(logits, -1)
    labels, mask = consumer_labels(shard, slots[rank], seqs)
    valid = mask & (labels >= 0) & (labels < VOCAB)
    picked = logp.gather(1, torch.from_numpy(np.where(valid, labels, 0))[:, None])[:, 0]
    local = torch.tensor(int(mask.sum()), dtype=torch.float64)
    count = int(_all_sum(local, group)) if cp > 1 else int(local)
    loss = -(picked * torch.from_numpy(valid)).sum() / max(count, 1)
    loss.backward()
    grads: dict[str, np.ndarray] | None = None
    if cp > 1:
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad = _all_sum(p.grad, group)
    if rank == 0:
        grads = _grads(model)
    label_logp = np.where(valid, picked.detach().numpy(), np.nan)
    label_logp[mask & ~valid] = -np.inf  # a label that is no token id
    return RankRun(logp.detach().numpy(), labels, label_logp, mask, float(loss.detach()), count,
                   grads)


# ----------------------------------------------------------------------------------------------
# From a target's packs to shards


def make_shards(inputs: Sequence[Any], labels: Sequence[Any] | None, cp: int) -> list[Shard]:
    """Shards from every rank's pack without need_roll (`inputs`: objects with rows, position
    ids as `pos` or `position_ids`, and meta) and, for labels, every rank's pack with need_roll
    (its `labels` where it gives them beside the rows, else its rows) and loss mask. Rows that no
    model can read (not 1-D integers, ranks of different sizes under CP) raise RuleViolation
    of R-MODEL-1..3 (R-CONSUMER-3 says why they must be equal)."""
    from .under_test import RuleViolation

    rule = {"R-MODEL-3"} if cp > 1 else {"R-MODEL-1", "R-MODEL-2"}
    out = []
    for rank, got in enumerate(inputs):
        rows = np.asarray(got.rows)
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise RuleViolation(f"rank {rank}: rows {rows.dtype}{list(rows.shape)} are not token "
                                "ids [n] for a batch of 1-D int64 sequences", rule)
        pos = getattr(got, "position_ids", getattr(got, "pos", None))
        pos = None if pos is None else np.asarray(pos).reshape(-1)
        if pos is not None and pos.shape != rows.shape:
            raise RuleViolation(f"rank {rank}: {pos.size} position ids for {rows.size} rows",
                                rule)
        label_rows = mask = None
        if labels is not None:
            lab = labels[rank]
            given = getattr(lab, "labels", None)
            label_rows = np.asarray(given if given is not None else lab.rows).reshape(-1)
            given_mask = getattr(lab, "loss_mask", None)
            mask = None if given_mask is None else np.asarray(given_mask).reshape(-1)
            for name, arr in (("labels", label_rows), ("loss mask", mask)):
                if arr is not None and arr.shape != rows.shape:
                    raise RuleViolation(f"rank {rank}: {arr.size} {name} for {rows.size} "
                                        "input rows", {"R-MODEL-4"})
        out.append(Shard(rows, pos, dict(got.meta), label_rows, mask))
    counts = [len(s.rows) for s in out]
    if len(set(counts)) > 1:
        raise RuleViolation(f"ranks hold {counts} rows: CP attention exchanges equal blocks "
                            "(R-CONSUMER-3)", rule)
    return out
