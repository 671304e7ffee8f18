"""TRL 1.16's pack_dataset as a binner (thd_packing/peers/trl_bins.py), judged here by hand.

(a) Random lengths through the contract (`bins_contract.check_bins`) and, since "bfd" and
"bfd_split" claim best fit decreasing and "wrapped" is R-BIN-14's algorithm, against the
reference bin for bin. (b) Each real bug pinned by a plain reproduction against TRL's own
`pack_dataset`, asserting the bug is there: when one of these fails, TRL has changed.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("datasets")
pytest.importorskip("pyarrow")
data_utils = pytest.importorskip("trl.data_utils")

from datasets import Dataset, Features, List, Value  # noqa: E402

from thd_packing.conformance.bins_contract import check_bins  # noqa: E402
from thd_packing.conformance.buffer import RuleViolation  # noqa: E402
from thd_packing.peers import _wiring  # noqa: E402
from thd_packing.peers.trl_bins import WIRING, TrlBfd, TrlBfdSplit, TrlWrapped  # noqa: E402
from thd_packing.reference import bins as rb  # noqa: E402

DRAWS = 100  # per strategy; about 15 ms a call
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # capacity 0's arithmetic


@pytest.fixture(scope="module")
def targets() -> dict[str, object]:
    return {cls.strategy: cls() for cls in (TrlBfd, TrlBfdSplit, TrlWrapped)}


def _config(target: object) -> dict[str, object]:
    declared = target.declared_bins  # type: ignore[attr-defined]
    return {"algorithm": next(iter(declared.algorithms)), "overflow": next(iter(declared.overflow)),
            "order": "placement"}


def _as_sets(bins: list[list[tuple[int, int, int]]]) -> list[list[tuple[int, int, int]]]:
    return sorted(sorted(tuple(p) for p in b) for b in bins)


def _draws(seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(DRAWS):
        capacity = rng.randint(1, 24)
        out.append(([rng.randint(1, 2 * capacity) for _ in range(rng.randint(1, 14))],
                    capacity))
    return out


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split", "wrapped"])
def test_contract_and_reference(targets: dict[str, object], strategy: str) -> None:
    """Positive lengths, some longer than the capacity: the contract holds; "wrapped" is the
    reference's `wrapped` bin for bin; "bfd" and "bfd_split" are best fit decreasing up to
    ties: the same number of bins with the same fills (R-BIN-12's tie rule, the lowest
    numbered bin, is not TRL's: see test_bfd_breaks_ties_by_fill_order)."""
    target = targets[strategy]
    for lengths, capacity in _draws({"bfd": 1, "bfd_split": 2, "wrapped": 3}[strategy]):
        config = {"capacity": capacity, **_config(target)}
        got = check_bins(lengths, target.bin(lengths, config).bins, config)  # type: ignore[attr-defined]
        ref = rb.bin_lengths(lengths, rb.as_config(config)).bins
        if strategy == "wrapped":
            assert _as_sets(got) == _as_sets(ref), (lengths, capacity)
        else:
            fills = sorted(sum(p[2] for p in b) for b in got)
            assert fills == sorted(sum(p.length for p in b) for b in ref), (lengths, capacity)


def test_bfd_breaks_ties_by_fill_order(targets: dict[str, object]) -> None:
    """Not a bug (a spec gap): among bins equally full, TRL's segment tree takes the one that
    reached that fill first (a deque per remaining space), R-BIN-12 the lowest numbered. Same
    bins count and fills, other contents, so a bin-for-bin differential fails on ties."""
    lengths, capacity = [8, 7, 5, 2, 5, 1, 8, 3, 5], 11
    config = {"capacity": capacity, **_config(targets["bfd"])}
    got = targets["bfd"].bin(lengths, config).bins  # type: ignore[attr-defined]
    ref = rb.bin_lengths(lengths, rb.as_config(config)).bins
    assert _as_sets(got) != _as_sets(ref)
    # the 1 (example 5) joins the bin of 5 + 5 (filled second-to-last to 10), not 8 + 2
    assert any({p[0] for p in b} == {2, 4, 5} for b in got)
    assert any({p.example for p in b} == {6, 3, 5} for b in ref)


def _pack(lengths: list[int], seq_length: int, strategy: str) -> list[list[int]]:
    """TRL's own call: a dataset whose token t of example i is 100 * i + t."""
    ds = Dataset.from_dict({"input_ids": [[100 * i + t for t in range(n)]
                                          for i, n in enumerate(lengths)]},
                           features=Features({"input_ids": List(Value("int64"))}))
    return data_utils.pack_dataset(ds, seq_length, strategy=strategy)["input_ids"]


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split", "wrapped"])
def test_bug_zero_length_example_vanishes(strategy: str) -> None:
    """Bug (R-BIN-18): an empty example is in no pack. `_pack_bfd` filters out empty
    sequences before binning; "wrapped" concatenates, so an empty row leaves no trace. A user
    loses no token, but the example count changes under them: a dataset whose rows are joined
    by index with another (rewards, metadata) or counted for epochs is off by the empty rows,
    and no warning says so. Smallest input: one empty example."""
    packed = _pack([0, 2], 4, strategy)
    assert packed == [[100, 101]]  # example 0 is gone


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split"])
def test_bug_only_empty_examples_crash(strategy: str) -> None:
    """Bug (R-BIN-1, a crash on a valid input): a batch of only empty examples raises
    pyarrow's ArrowNotImplementedError ("array_take" has no kernel for a null-typed empty
    index list): every row filtered out, `pc.take` gets `[]`. "wrapped" returns no pack. A
    user meets it with `map_kwargs={"batch_size": ...}` small enough for a batch of empty rows
    (or a dataset of them): the packing run dies."""
    import pyarrow as pa

    with pytest.raises(pa.ArrowNotImplementedError):
        _pack([0], 4, strategy)
    assert _pack([0], 4, "wrapped") == []


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split", "wrapped"])
def test_zero_length_through_the_contract(targets: dict[str, object], strategy: str) -> None:
    target = targets[strategy]
    config = {"capacity": 4, **_config(target)}
    with pytest.raises(RuleViolation, match="R-BIN-18"):
        check_bins([0, 2], target.bin([0, 2], config).bins, config)  # type: ignore[attr-defined]


@pytest.mark.parametrize("strategy", ["bfd", "bfd_split"])
def test_bug_empty_dataset_raises(strategy: str) -> None:
    """Bug (R-BIN-1: n = 0 is valid and gives no bins): an empty dataset raises ValueError
    ("Columns ['seq_lengths'] not in the dataset"): `map` never calls `_pack_bfd` on zero rows,
    so the column it adds is missing when the format is restored. A user whose filtering left a
    split empty (an empty eval set) gets a crash from packing instead of an empty dataset."""
    with pytest.raises(ValueError, match="seq_lengths"):
        _pack([], 4, strategy)
    assert _pack([], 4, "wrapped") == []


@pytest.mark.parametrize(("strategy", "error"), [
    ("bfd", AssertionError), ("bfd_split", IndexError), ("wrapped", ZeroDivisionError)])
def test_bug_capacity_zero_crashes(strategy: str, error: type[Exception]) -> None:
    """Bug (R-BIN-2): seq_length=0 is not refused with a ValueError naming it: the segment
    tree's `assert 0 < val`, an index error from the split arithmetic, a division by zero.
    Under `python -O` the assert is gone. What a user loses: a clear message; nothing else."""
    with pytest.raises(error):
        _pack([3, 2], 0, strategy)


def test_bug_negative_capacity_loses_every_token_wrapped() -> None:
    """Bug (R-BIN-2): "wrapped" with seq_length=-1 returns an empty dataset: `np.arange(0, n,
    -1)` is empty, so no pack is cut and every token of the dataset is gone, silently."""
    assert _pack([3, 2], -1, "wrapped") == []


def test_bug_fractional_capacity_overfills_wrapped() -> None:
    """Bug (R-BIN-2, R-BIN-5): "wrapped" takes seq_length=2.5 (a YAML `max_length: 2.5e3`
    loads as a float) and cuts at offsets 0, 2 (cast from 2.5), 5: a pack of 3 tokens, over
    the 2.5 it was given; "bfd" raises AttributeError (float has no bit_length)."""
    assert [len(row) for row in _pack([3, 2], 2.5, "wrapped")] == [2, 3]  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        _pack([3, 2], 2.5, "bfd")  # type: ignore[arg-type]


def test_wiring_matches_the_wheel() -> None:
    assert _wiring.problems(WIRING) == []
