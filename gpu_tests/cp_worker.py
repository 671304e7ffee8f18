"""One process per GPU for the context-parallel check (launched by test_context_parallel.py with
`python -m torch.distributed.run --nproc_per_node=N gpu_tests/cp_worker.py --out FILE`).

Every rank packs the same batch with impl's zigzag layout for its own cp_rank (R-SHARD-2), runs TE
DotProductAttention with context parallelism (p2p) forward and backward on its shard, and the
shards are gathered and unpacked (R-UNPACK-1). Rank 0 compares each sequence's real tokens with
the same TE module run without CP on one GPU (cp = 1 pack) and with the fp32 reference, and writes
a JSON verdict. Exit status 0 only when every comparison passed.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import os
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import impl  # noqa: E402
from gpu_tests.cases import BF16_TOL, CONVENTIONS, QKV, make_qkv  # noqa: E402
from gpu_tests.fallbacks import attn_meta  # noqa: E402
from gpu_tests.fp32_reference import Result, as_fp32, assert_matches_reference, reference_result  # noqa: E402
from gpu_tests.packed_run import run_packed  # noqa: E402
from gpu_tests.te_attention import TEAttention, te_backend  # noqa: E402

HEADS, HEAD_DIM = 4, 64
LENGTHS = [0, 70, 1, 0, 33, 128, 5]


def _make_te_cp(group: Any, world: int) -> TEAttention:
    attn = TEAttention(HEADS, HEAD_DIM)
    setter = getattr(attn.module, "set_context_parallel_group", None)
    if setter is None:
        raise RuntimeError("DotProductAttention has no set_context_parallel_group")
    ranks = list(range(world))
    stream = torch.cuda.Stream()
    if "cp_comm_type" in inspect.signature(setter).parameters:
        setter(group, ranks, stream, cp_comm_type="p2p")
    else:
        setter(group, ranks, stream)  # older TE: p2p is the only mode
    return attn


def _gather(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t.contiguous())
    return parts


def _cp_result(
    qkv: QKV, cfg: Any, convention: str, rank: int, world: int, attn: TEAttention
) -> Result:
    """CP forward/backward on this rank's shard; every rank returns the unpacked full result."""
    q, _, plan = impl.pack_thd(qkv.q, cfg, rank)
    k, _, _ = impl.pack_thd(qkv.k, cfg, rank)
    v, _, _ = impl.pack_thd(qkv.v, cfg, rank)
    dout, _, _ = impl.pack_thd(qkv.dout, cfg, rank)
    q, k, v, dout = (t.cuda() for t in (q, k, v, dout))
    meta = attn_meta(plan, convention, "cuda")  # global metadata, as TE expects with CP
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attn(q, k, v, meta)
    out.backward(dout)
    assert q.grad is not None and k.grad is not None and v.grad is not None
    fields = {}
    for name, t in (("out", out.detach()), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        fields[name] = impl.unpack_thd(_gather(t, world), plan, cfg)
    return Result(**fields)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    # A bounded collective timeout: a rank that fails must not leave the others waiting forever.
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    verdict: dict[str, Any] = {"world": world, "lengths": LENGTHS, "cases": {}}
    ok = True
    try:
        qkv = make_qkv(LENGTHS, HEADS, HEAD_DIM, seed=17, device="cuda")
        ref = reference_result(qkv)
        cp_attn = _make_te_cp(dist.new_group(list(range(world))), world)
        single_attn = TEAttention(HEADS, HEAD_DIM)
        for convention in CONVENTIONS:
            for bucket in (None, 1024):
                name = f"{convention}/bucket={bucket}"
                cfg = impl.PackConfig(cp_size=world, cp_layout="zigzag", bucket=bucket)
                with te_backend("auto"):
                    got = _cp_result(qkv, cfg, convention, rank, world, cp_attn)
                    if rank == 0:
                        single = run_packed(
                            impl, qkv, impl.PackConfig(bucket=bucket), convention, single_attn
                        ).real
                if rank != 0:
                    continue
                try:
                    one_gpu = as_fp32(single)
                    assert_matches_reference(got, one_gpu, BF16_TOL, f"cp vs single {name}")
                    assert_matches_reference(got, ref, BF16_TOL, f"cp vs fp32 {name}")
                    assert_matches_reference(single, ref, BF16_TOL, f"single vs fp32 {name}")
                    err = max(
                        (a.float() - b).abs().max().item()
                        for a, b in zip(got.out, ref.out, strict=True)
                        if a.numel()
                    )
                    verdict["cases"][name] = {"ok": True, "max_abs_out_error_vs_fp32": err}
                except AssertionError as e:
                    ok = False
                    verdict["cases"][name] = {"ok": False, "error": str(e)[:2000]}
    except Exception:
        ok = False
        verdict["exception"] = traceback.format_exc()[-4000:]
        print(verdict["exception"], file=sys.stderr, flush=True)
    verdict["ok"] = ok
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(verdict, f, indent=2)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
