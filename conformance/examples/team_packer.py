"""Worked example (conformance/README.md): a trainer team's own packing code and its adapter.

`team_pack` stands for code in your trainer. It is deliberately naive: it pads the total in
stages (FP8, then min_local_rows, then the bucket) and rounds the bucket stage to
lcm(bucket, cp) only, so the suite finds real bugs in it. Run:

    pytest conformance --target conformance.examples.team_packer:TeamTarget
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from conformance.protocol import Declared, Packed

# --- the team's code ------------------------------------------------------------------------


def team_pack(batch: list[torch.Tensor], *, tp: int, cp: int, rank: int, fp8: bool = False,
              bucket: int | None = None, min_local_rows: int | None = None,
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zigzag THD packing for one CP rank: (rows, position_ids, cu_seqlens_padded)."""
    align = tp * cp * (2 if cp > 1 else 1)
    total_align = 128 * align
    if fp8:
        align = math.lcm(16, align)
    lengths = [int(t.shape[0]) for t in batch]
    padded = [-(-n // align) * align for n in lengths]
    if fp8:
        padded[-1] += -sum(padded) % total_align
    if min_local_rows is not None and sum(padded) < cp * min_local_rows:
        padded[-1] += cp * min_local_rows - sum(padded)
    if bucket is not None:
        padded[-1] += -sum(padded) % math.lcm(bucket, cp)
    cu = torch.tensor([0, *np.cumsum(padded)], dtype=torch.int32)
    local = int(cu[-1]) // cp
    rows = torch.zeros((local, *batch[0].shape[1:]), dtype=batch[0].dtype)
    pos = torch.zeros(local, dtype=torch.int64)
    out = 0
    for seq, p in zip(batch, padded, strict=True):
        chunk = p // (2 * cp) if cp > 1 else p
        pieces = [rank, 2 * cp - 1 - rank] if cp > 1 else [0]
        for piece in pieces:
            start = piece * chunk
            real = max(0, min(chunk, seq.shape[0] - start))
            rows[out:out + real] = seq[start:start + real]
            pos[out:out + real] = torch.arange(start, start + real)
            out += chunk
    return rows, pos, cu


# --- the adapter: numpy in, the team's types, numpy out -----------------------------------


class TeamTarget:
    """Adapter that makes `team_pack` a conformance target (conformance/protocol.py)."""

    name = "team"
    description = "example: team_pack() in conformance/examples/team_packer.py"
    # What team_pack supports beyond the base features. Everything else (FP8, labels,
    # pad_value, the contiguous layout, ...) is declined: never drawn, reported "declined".
    # It validates no parallel state, batch or unpack of its own.
    declared = Declared(features=frozenset({"bucket", "min_local_rows"}),
                        lacks=frozenset({"contiguous"}),
                        validated_elsewhere=frozenset({"parallel_state", "batch", "unpack"}))

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> Packed:
        if need_roll or pad_value != 0 or config.get("fp8") or (
                config.get("cp_layout") == "contiguous" and config.get("cp_size", 1) > 1):
            # Declined above, so the suite never asks for these on a valid case.
            raise NotImplementedError("not supported by the team_pack adapter")
        batch = [torch.from_numpy(np.array(s)) if isinstance(s, np.ndarray) else s for s in seqs]
        rows, pos, cu = team_pack(
            batch, tp=config.get("tp_size", 1), cp=config.get("cp_size", 1), rank=cp_rank,
            bucket=config.get("bucket"),
            min_local_rows=config.get("min_local_rows"),
        )
        cu_np = cu.numpy()
        meta = {"cu_seqlens_padded": cu_np, "seqlens_padded": np.diff(cu_np),
                "total": int(cu_np[-1]), "local_rows": int(rows.shape[0])}
        return Packed(rows.numpy(), pos.numpy(), meta)
