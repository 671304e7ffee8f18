"""The bin step's benchmark (bench/bins.py): its vectorized L2 bound against the reference's,
its closed-form plan totals against impl's plans, each peer adapter on a small input (skipped
only where the peer's wheel is not installed), and one tiny run with impl alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import impl
from bench import bin_peers, bins
from thd_packing.reference import PackConfig as RefPackConfig
from thd_packing.reference import bins as ref_bins


@pytest.mark.parametrize("seed", range(40))
def test_l2_bound_is_the_references_lower_bound(seed: int) -> None:
    rng = np.random.default_rng(seed)
    capacity = int(rng.integers(1, 200))
    lengths = rng.integers(0, capacity + 1, size=int(rng.integers(0, 24)))
    config = ref_bins.BinConfig(capacity)
    assert bins.l2_bound(lengths, capacity) == ref_bins.lower_bound(lengths.tolist(), config)


@pytest.mark.parametrize("seed", range(10))
def test_l2_bound_on_rows_is_the_references_lower_bound(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    tp, cp = int(rng.choice([1, 2])), int(rng.choice([1, 2, 4]))
    pack = RefPackConfig(tp_size=tp, cp_size=cp)
    config = ref_bins.BinConfig(int(rng.integers(64, 400)), cost="rows", pack=pack)
    s_max = ref_bins.capacity_sum(config)
    lengths = rng.integers(1, s_max + 1, size=int(rng.integers(1, 20)))
    a = pack.sequence_align
    assert bins.l2_bound(-(-lengths // a) * a, s_max) == ref_bins.lower_bound(
        lengths.tolist(), config)


def test_l2_bound_known_values() -> None:
    assert bins.l2_bound(np.array([], dtype=np.int64), 10) == 0
    assert bins.l2_bound(np.array([6, 6, 6]), 10) == 3  # L1 says 2
    assert bins.l2_bound(np.array([5, 5, 5, 5]), 10) == 2


def test_plan_totals_are_impls_plan_totals() -> None:
    rng = np.random.default_rng(0)
    groups = [rng.integers(1, 3000, size=int(rng.integers(1, 9))).tolist() for _ in range(50)]
    totals = bins.plan_totals(bin_peers.from_values(groups), bins.PACK)
    assert totals.tolist() == [impl.plan_thd(g, bins.PACK).total for g in groups]


def _needs(dist: str, module: str | None = None) -> None:
    """Skip when the peer's wheel (or the library it needs) is absent; nothing else skips."""
    if bin_peers.version(dist) is None:
        pytest.skip(f"{dist} is not installed (`nox -s bench_bins` installs it)")
    if module is not None:
        pytest.importorskip(module)


@pytest.mark.parametrize("peer,dist,module", [
    ("areal", "areal", None), ("verl", "verl", None), ("trl", "trl", "pyarrow"),
    ("binpacking", "binpacking", "binpacking"), ("llamafactory", "llamafactory", None)])
def test_peer_adapters_bin_every_example_once(peer: str, dist: str, module: str | None) -> None:
    _needs(dist, module)
    lengths = bins.lengths_of("lognormal", 300)
    loaded = bin_peers.LOADERS[peer]()
    assert loaded
    for binner in loaded:
        out = binner.bins(binner.call(binner.prepare(lengths, bins.CAPACITY)), lengths)
        assert bins.figures(binner, out, lengths)["complete"], binner.name
        totals = np.add.reduceat(out[0], np.concatenate(([0], np.cumsum(out[1])[:-1])))
        assert totals.max() <= bins.CAPACITY, binner.name  # token budgets are kept


def test_tiny_run_with_impl_alone(tmp_path: Path) -> None:
    out = tmp_path / "bins.json"
    code = bins.main(["--sizes", "300", "--step", "64", "--repeats", "1", "--peers",
                      "--dists", "lognormal", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    case = report["dataset"]["lognormal"]["300"]
    assert case["impl ffd rows"]["overflow_pct"] == 0.0
    assert all(e["complete"] and e["bins_over_l2"] >= 1.0 for e in case.values())
    assert all(report["meta"]["checks"].values())
