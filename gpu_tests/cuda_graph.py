"""Capture packed attention (forward and backward) once in a CUDA graph and replay it over
micro-batches of different B within one bucket.

A captured graph reads fixed addresses, so each micro-batch is packed eagerly with impl and copied
into the graph's static inputs (the rows, cu_seqlens, cu_seqlens_padded), as Megatron's CUDA-graph
path does. Packing itself is not captured: impl plans on the host and copies its small tables to
the device, which a capture forbids. The copy succeeds only when the micro-batch's graph key
(``static_meta.graph_key``) is the captured one: with ``max_num_seqs`` and ``max_seqlen="total"``
it is, for every B the bucket admits; without them ``cu_seqlens`` changes length with B and
``load`` raises.

``EagerRunner`` has the same interface with no graph, so ``tests/gpu_harness`` checks the loading
and read-back on the CPU; ``CapturedRunner`` needs CUDA.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .fallbacks import AttnFn, AttnMeta
from .fp32_reference import Result
from .packed_run import real_rows
from .static_meta import GraphKey, declared_pad_between_seqs, graph_key


class StaticInputs:
    """The fixed tensors a captured attention reads; ``load`` refills them per micro-batch."""

    def __init__(
        self,
        key: GraphKey,
        heads: int,
        head_dim: int,
        *,
        convention: str,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        self.key = key
        self.convention = convention
        rows = (key.total, heads, head_dim)
        self.q, self.k, self.v = (
            torch.zeros(rows, dtype=dtype, device=device, requires_grad=True) for _ in range(3)
        )
        self.dout = torch.zeros(rows, dtype=dtype, device=device)
        self.cu_real = torch.zeros(key.cu_seqlens_len, dtype=torch.int32, device=device)
        self.cu_padded = torch.zeros(key.cu_seqlens_padded_len, dtype=torch.int32, device=device)
        self.meta = AttnMeta(
            self.cu_real,
            self.cu_real,
            self.cu_padded,
            self.cu_padded,
            key.max_seqlen,
            key.max_seqlen,
            convention,
            declared_pad_between_seqs=declared_pad_between_seqs(convention),
        )

    def load(self, plan: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: Any) -> None:
        """Copy one micro-batch in; ValueError (naming the field) if its graph key differs."""
        got = graph_key(plan)
        for name in GraphKey._fields:
            want_val, got_val = getattr(self.key, name), getattr(got, name)
            if want_val != got_val:
                raise ValueError(
                    f"micro-batch does not fit the captured graph: {name}={got_val}, "
                    f"captured {name}={want_val} (plan {got})"
                )
        padded = torch.as_tensor(plan.cu_seqlens_padded)
        real = padded if self.convention == "verl" else torch.as_tensor(plan.cu_seqlens)
        with torch.no_grad():
            for dst, src in ((self.q, q), (self.k, k), (self.v, v), (self.dout, dout)):
                dst.copy_(src)
            self.cu_real.copy_(real)
            self.cu_padded.copy_(padded)


@dataclass
class Outputs:
    """The tensors one run writes: output and q/k/v gradients, whole packed buffers."""

    out: torch.Tensor
    dq: torch.Tensor
    dk: torch.Tensor
    dv: torch.Tensor

    def real(self, plan: Any) -> Result:
        """Copies of each real sequence's rows (R-META-6), safe from the next replay."""
        return Result(
            *([t.detach().clone() for t in real_rows(getattr(self, f), plan)] for f in _OUT_FIELDS)
        )


_OUT_FIELDS = ("out", "dq", "dk", "dv")


def _forward_backward(fn: AttnFn, inp: StaticInputs) -> Outputs:
    for t in (inp.q, inp.k, inp.v):
        t.grad = None
    out = fn(inp.q, inp.k, inp.v, inp.meta)
    out.backward(inp.dout)
    assert inp.q.grad is not None and inp.k.grad is not None and inp.v.grad is not None
    return Outputs(out.detach(), inp.q.grad, inp.k.grad, inp.v.grad)


@dataclass
class EagerRunner:
    """Runs the attention on the static inputs without a graph (the CPU stand-in)."""

    fn: AttnFn
    inputs: StaticInputs
    runs: int = 0

    def run(self) -> Outputs:
        self.runs += 1
        return _forward_backward(self.fn, self.inputs)


@dataclass
class CapturedRunner:
    """Warms up on a side stream, captures forward + backward once, then only replays.

    Follows PyTorch's whole-network capture recipe: warm-up iterations on a side stream, grads
    set to None before capture so that the captured backward owns them.
    """

    fn: AttnFn
    inputs: StaticInputs
    warmup: int = 3
    replays: int = 0
    graph: Any = field(init=False)
    outputs: Outputs = field(init=False)

    def __post_init__(self) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                _forward_backward(self.fn, self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        for t in (self.inputs.q, self.inputs.k, self.inputs.v):
            t.grad = None
        with torch.cuda.graph(self.graph):
            self.outputs = _forward_backward(self.fn, self.inputs)

    def run(self) -> Outputs:
        self.graph.replay()
        self.replays += 1
        return self.outputs


Runner = EagerRunner | CapturedRunner


@dataclass
class Packed:
    """One micro-batch packed with impl: plan and q/k/v/dout rows."""

    plan: Any
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor


def pack_qkv(impl_mod: Any, qkv: Any, config: Any, device: torch.device | str) -> Packed:
    """Pack q/k/v/dout (cp=1) with impl; pad rows hold 0 (R-ROW-2)."""
    parts = []
    plan = None
    for seqs in (qkv.q, qkv.k, qkv.v, qkv.dout):
        rows, _, plan = impl_mod.pack_thd(seqs, config, 0)
        parts.append(rows.to(device))
    return Packed(plan, *parts)


def run_stream(
    impl_mod: Any,
    qkvs: list[Any],
    config: Any,
    make_runner: Callable[[StaticInputs], Runner],
    *,
    heads: int,
    head_dim: int,
    convention: str,
    device: torch.device | str,
) -> tuple[list[Result], Runner]:
    """Pack every micro-batch, load it into one set of static inputs, run; real rows per batch.

    The static inputs (and the runner, e.g. one capture) are built from the first micro-batch.
    """
    packed = [pack_qkv(impl_mod, qkv, config, device) for qkv in qkvs]
    first = packed[0]
    inputs = StaticInputs(
        graph_key(first.plan),
        heads,
        head_dim,
        convention=convention,
        dtype=first.q.dtype,
        device=device,
    )
    inputs.load(first.plan, first.q, first.k, first.v, first.dout)
    runner = make_runner(inputs)
    results = []
    for p in packed:
        inputs.load(p.plan, p.q, p.k, p.v, p.dout)
        results.append(runner.run().real(p.plan))
    return results, runner
