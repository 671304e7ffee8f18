"""TE Linear under FP8 autocast accepts impl's packed rows when the plan's fp8 flag is on.

FP8 GEMMs need the row count that reaches them to be a multiple of 16 (domain facts §1). With
`fp8=True` the spec makes every total a multiple of F = 128 * A0 (R-TOTAL-1, R-TOTAL-2), so every
CP rank's rows, and every TP slice of them (sequence parallelism), qualify. The outputs are
compared with an fp32 matmul. Negative control: the same batch packed without the flag has 17
rows, and TE must reject it.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not importable")

import impl  # noqa: E402
from gpu_tests.fp32_reference import exact_fp32  # noqa: E402
from gpu_tests.te_attention import import_te  # noqa: E402

pytestmark = pytest.mark.te

HIDDEN, OUT_FEATURES = 64, 128
LENGTHS = [5, 0, 12]  # 17 real rows: misaligned for FP8 without the flag
# An FP8 GEMM's relative (Frobenius) error against fp32: e4m3 keeps 3 mantissa bits.
FP8_REL_TOL = 0.1
FP8_CONFIGS: dict[str, dict[str, Any]] = {
    "cp1": {"fp8": True},
    "cp2": {"fp8": True, "cp_size": 2},
    "cp2-tp2-bucket": {"fp8": True, "cp_size": 2, "tp_size": 2, "bucket": 512},
}


def _te() -> Any:
    te, why = import_te()
    if te is None:
        pytest.skip(why or "transformer_engine unavailable")
    return te


def _fp8_unavailable_reason(te: Any) -> str | None:
    """Why FP8 cannot run on this GPU, or None (feature-detected across TE versions)."""
    probes = []
    if hasattr(te, "is_fp8_available"):
        probes.append(lambda: te.is_fp8_available(return_reason=True))
    fp8_mod = getattr(te, "fp8", None)
    if fp8_mod is not None and hasattr(fp8_mod, "check_fp8_support"):
        probes.append(fp8_mod.check_fp8_support)
    if fp8_mod is not None and hasattr(
        getattr(fp8_mod, "FP8GlobalStateManager", None), "is_fp8_available"
    ):
        probes.append(fp8_mod.FP8GlobalStateManager.is_fp8_available)
    for probe in probes:
        try:
            got = probe()
        except TypeError:
            continue
        ok, reason = got if isinstance(got, tuple) else (bool(got), "")
        return None if ok else f"FP8 unavailable: {reason}"
    major, minor = torch.cuda.get_device_capability()
    return None if (major, minor) >= (8, 9) else f"FP8 needs sm89+, found sm{major}{minor}"


def _fp8_autocast(te: Any) -> contextlib.AbstractContextManager[Any]:
    """FP8 autocast with a current-scaling recipe where TE has one (else delayed scaling)."""
    from transformer_engine.common import recipe as te_recipe

    make = getattr(te_recipe, "Float8CurrentScaling", None) or te_recipe.DelayedScaling
    rec = make()
    if hasattr(te, "fp8_autocast"):
        return te.fp8_autocast(enabled=True, fp8_recipe=rec)
    if hasattr(te, "autocast"):
        params = inspect.signature(te.autocast).parameters
        key = "recipe" if "recipe" in params else "fp8_recipe"
        return te.autocast(enabled=True, **{key: rec})
    pytest.skip("TE has neither fp8_autocast nor autocast")


def _linear(te: Any) -> Any:
    torch.manual_seed(0)
    return te.Linear(HIDDEN, OUT_FEATURES, bias=True, params_dtype=torch.bfloat16).cuda()


def _seqs() -> list[Any]:
    g = torch.Generator().manual_seed(2)
    return [torch.randn(n, HIDDEN, generator=g).to("cuda", torch.bfloat16) for n in LENGTHS]


@pytest.mark.rules("R-ALIGN-2", "R-TOTAL-1", "R-TOTAL-2", "R-META-5")
@pytest.mark.parametrize("config", list(FP8_CONFIGS))
def test_fp8_linear_accepts_packed_rows(config: str, gpu_report: dict[str, Any]) -> None:
    """Every CP rank's rows, and each TP slice of them, go through an FP8 te.Linear and match
    the fp32 matmul of the same rows."""
    te = _te()
    reason = _fp8_unavailable_reason(te)
    if reason:
        pytest.skip(reason)
    cfg = impl.PackConfig(**FP8_CONFIGS[config])
    lin = _linear(te)
    w, b = lin.weight.detach().float(), lin.bias.detach().float()
    worst = 0.0
    for rank in range(cfg.cp_size):
        rows, _, plan = impl.pack_thd(_seqs(), cfg, rank)
        assert rows.shape[0] == plan.local_rows
        for piece in rows.to("cuda").chunk(cfg.tp_size):  # what each sequence-parallel rank sees
            assert piece.shape[0] % 16 == 0, f"{config}: {piece.shape[0]} rows reach the GEMM"
            with torch.no_grad():
                for _ in range(3):  # let a delayed-scaling recipe settle its scales
                    with _fp8_autocast(te):
                        y = lin(piece)
            with exact_fp32():
                want = piece.float() @ w.T + b
            rel = ((y.float() - want).norm() / want.norm()).item()
            worst = max(worst, rel)
            assert rel < FP8_REL_TOL, f"{config} rank {rank}: relative error {rel:.3g}"
    gpu_report[f"fp8_linear_rel_error[{config}]"] = round(worst, 5)


@pytest.mark.rules("R-ALIGN-2", "R-TOTAL-1")
def test_fp8_linear_rejects_misaligned_rows() -> None:
    """Negative control: without the flag the pack has 17 rows, which FP8 execution refuses (so
    the positive test above shows the flag's padding is what makes TE accept the rows)."""
    te = _te()
    reason = _fp8_unavailable_reason(te)
    if reason:
        pytest.skip(reason)
    rows, _, plan = impl.pack_thd(_seqs(), impl.PackConfig(), 0)
    assert plan.total == sum(LENGTHS) == 17
    lin = _linear(te)
    with pytest.raises((AssertionError, RuntimeError, ValueError)), torch.no_grad():
        with _fp8_autocast(te):
            lin(rows.to("cuda"))
        torch.cuda.synchronize()
