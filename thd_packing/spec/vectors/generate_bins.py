"""Generate the bin step's golden vectors in spec/vectors/bins/ from the reference.

Run from the repository root: `python -m thd_packing.spec.vectors.generate_bins` (writes) or
`... --check` (exits 1 if any checked-in file differs); tests/spec/test_bin_vectors.py runs the
check. Each vector is one call: `bin_lengths` (lengths, config, then bins and fates or the
error class), `partition` (weights, k, equal_size, then parts) or `ranks` (lengths, config,
dp_size, then each rank's bin numbers). The spec's worked examples (spec/bins.md B8) come first
under their own names.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from thd_packing.reference import bins as rb
from thd_packing.spec.examples import bin_examples

HERE = Path(__file__).resolve().parent / "bins"

# (name, rules, lengths, config): every algorithm under both costs, every overflow policy,
# both orders, the bin counts, and the inputs each rule rejects.
PACK_TP2_CP4 = {"tp_size": 2, "cp_size": 4}
LENGTHS = [9, 30, 2, 17, 0, 25, 5, 12, 40, 1]
CASES: list[tuple[str, list[str], Any, dict[str, Any]]] = [
    *[(f"{algorithm}-tokens", ["R-BIN-18", rule], LENGTHS, {"capacity": 48, "algorithm": algorithm,
       **({"overflow": "split"} if algorithm == "wrapped" else {})})
      for algorithm, rule in zip(rb.ALGORITHMS, ["R-BIN-10", "R-BIN-11", "R-BIN-12", "R-BIN-13",
                                                 "R-BIN-14", "R-BIN-15"], strict=True)],
    *[(f"{algorithm}-rows-tp2-cp4", ["R-BIN-4", "R-BIN-5", rule], LENGTHS,
       {"capacity": 64, "algorithm": algorithm, "cost": "rows", "pack": PACK_TP2_CP4,
        **({"overflow": "split"} if algorithm == "wrapped" else {})})
      for algorithm, rule in zip(rb.ALGORITHMS, ["R-BIN-10", "R-BIN-11", "R-BIN-12", "R-BIN-13",
                                                 "R-BIN-14", "R-BIN-15"], strict=True)],
    ("rows-static", ["R-BIN-5"], [3, 3, 3, 3, 3],
     {"capacity": 1024, "cost": "rows", "pack": {"max_num_seqs": 3, "tail": "segment"}}),
    ("rows-fixed-total", ["R-BIN-5"], [40, 30, 20, 10],
     {"capacity": 64, "cost": "rows", "pack": {"fixed_total": 64}}),
    ("rows-bucket-fp8", ["R-BIN-4", "R-BIN-5"], [100, 300, 200, 50, 7],
     {"capacity": 1024, "cost": "rows", "pack": {"tp_size": 2, "fp8": "mxfp8",
                                                  "bucket": 256}}),
    ("rows-split", ["R-BIN-8"], [70, 5],
     {"capacity": 32, "cost": "rows", "overflow": "split", "pack": {"cp_size": 2}}),
    ("rows-truncate", ["R-BIN-7"], [70, 5],
     {"capacity": 32, "cost": "rows", "overflow": "truncate", "pack": {"cp_size": 2}}),
    ("wrapped-rows-static", ["R-BIN-14"], [5, 5, 5, 5],
     {"capacity": 64, "algorithm": "wrapped", "overflow": "split", "cost": "rows",
      "pack": {"max_num_seqs": 2}}),
    ("overflow-drop-all", ["R-BIN-9"], [9, 9], {"capacity": 8, "overflow": "drop"}),
    ("order-placement", ["R-BIN-16"], LENGTHS, {"capacity": 48, "order": "placement"}),
    ("min-bins", ["R-BIN-17"], LENGTHS, {"capacity": 200, "min_bins": 4}),
    ("bins-multiple-of", ["R-BIN-17"], LENGTHS, {"capacity": 48, "bins_multiple_of": 4}),
    ("kk-multiple-of", ["R-BIN-15", "R-BIN-17"], LENGTHS,
     {"capacity": 48, "algorithm": "karmarkar_karp", "bins_multiple_of": 4, "min_bins": 3}),
    ("empty", ["R-BIN-1"], [], {"capacity": 1}),
    ("zero-lengths", ["R-BIN-1", "R-BIN-18"], [0, 0, 0], {"capacity": 1,
                                                          "algorithm": "first_fit"}),
    ("reject-negative", ["R-BIN-1"], [3, -1], {"capacity": 8}),
    ("reject-float-length", ["R-BIN-1"], [3, 1.5], {"capacity": 8}),
    ("reject-capacity-zero", ["R-BIN-2"], [3], {"capacity": 0}),
    ("reject-capacity-float", ["R-BIN-2"], [3], {"capacity": 2.5}),
    ("reject-unknown-algorithm", ["R-BIN-2"], [3], {"capacity": 8, "algorithm": "ffd"}),
    ("reject-pack-under-tokens", ["R-BIN-2"], [3], {"capacity": 8, "pack": {}}),
    ("reject-wrapped-without-split", ["R-BIN-2"], [3], {"capacity": 8,
                                                       "algorithm": "wrapped"}),
    ("reject-sequential-min-bins", ["R-BIN-2"], [3, 3], {"capacity": 8,
                                                        "algorithm": "sequential",
                                                        "min_bins": 2}),
    ("reject-static-no-room", ["R-BIN-3"], [1], {"capacity": 64, "cost": "rows",
                                                "pack": {"max_num_seqs": 1,
                                                         "tail": "segment"}}),
    ("reject-overflow-rows", ["R-BIN-6"], [17], {"capacity": 16, "cost": "rows",
                                                 "pack": {"tp_size": 2}}),
    ("reject-min-bins", ["R-BIN-17"], [1, 1], {"capacity": 8, "min_bins": 3}),
    ("reject-multiple-out-of-reach", ["R-BIN-17"], [8, 8, 8], {"capacity": 8,
                                                              "bins_multiple_of": 2}),
]
PARTITIONS: list[tuple[str, list[int], int, bool]] = [
    ("partition-2", [8, 7, 6, 5, 4], 2, False),
    ("partition-3", LENGTHS, 3, False),
    ("partition-equal-4", [*LENGTHS, 3, 3], 4, True),
    ("partition-zeros", [0, 0, 5, 0], 3, False),
    ("partition-too-many-parts", [1, 2], 3, False),
    ("partition-unequal", [1, 2, 3], 2, True),
]
RANKS: list[tuple[str, list[int], dict[str, Any], int]] = [
    ("ranks-tokens", LENGTHS, {"capacity": 48, "bins_multiple_of": 2}, 2),
    ("ranks-rows", LENGTHS, {"capacity": 64, "cost": "rows", "pack": PACK_TP2_CP4,
                             "bins_multiple_of": 4}, 4),
]


def _error(call: Any) -> str | None:
    try:
        call()
    except (TypeError, ValueError) as error:
        return type(error).__name__
    return None


def bin_vector(name: str, rules: list[str], lengths: Any, fields: dict[str, Any],
               dp_size: int | None = None) -> dict[str, Any]:
    """A `bin_lengths` call; with `dp_size`, also each rank's bins (R-BIN-20)."""
    vector: dict[str, Any] = {"name": name, "call": "bin_lengths", "rules": rules,
                              "lengths": lengths, "config": fields}
    out: list[rb.Bins] = []
    error = _error(lambda: out.append(rb.bin_lengths(lengths, rb.as_config(fields))))
    if error:
        vector["error"] = error
        return vector
    vector["bins"] = [[list(p) for p in b] for b in out[0].bins]
    vector["fates"] = out[0].fates
    if dp_size is not None:
        vector["dp_size"] = dp_size
        vector["ranks"] = rb.ranks(out[0], rb.as_config(fields), dp_size)
    return vector


def build() -> list[dict[str, Any]]:
    vectors = []
    for example in bin_examples():
        vectors.append(bin_vector(example["name"], example["rules"], example["lengths"],
                                  example["config"], example.get("dp_size")))
    for name, rules, lengths, fields in CASES:
        vectors.append(bin_vector(name, sorted(set(rules)), lengths, fields))
    for name, weights, k, equal_size in PARTITIONS:
        vector: dict[str, Any] = {"name": name, "call": "partition", "rules": ["R-BIN-19"],
                                  "weights": weights, "k": k, "equal_size": equal_size}
        try:
            vector["parts"] = rb.partition(weights, k, equal_size)
        except ValueError as error:
            vector["error"] = type(error).__name__
        vectors.append(vector)
    for name, lengths, fields, dp_size in RANKS:
        config = rb.as_config(fields)
        bins = rb.bin_lengths(lengths, config)
        vectors.append({"name": name, "call": "ranks", "rules": ["R-BIN-20"],
                        "lengths": lengths, "config": fields, "dp_size": dp_size,
                        "costs": rb.bin_costs(bins, config),
                        "ranks": rb.ranks(bins, config, dp_size)})
    return vectors


def render(vector: dict[str, Any]) -> str:
    return json.dumps(vector, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, don't write")
    args = parser.parse_args(argv)
    expected = {f"{vector['name']}.json": render(vector) for vector in build()}
    existing = {path.name: path.read_text() for path in HERE.glob("*.json")}
    if args.check:
        differ = sorted(name for name in set(expected) | set(existing)
                        if expected.get(name) != existing.get(name))
        for name in differ:
            print(f"differs: spec/vectors/bins/{name}", file=sys.stderr)
        return 1 if differ else 0
    HERE.mkdir(exist_ok=True)
    for name in set(existing) - set(expected):
        (HERE / name).unlink()
    for name, text in expected.items():
        (HERE / name).write_text(text)
    print(f"wrote {len(expected)} vectors to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
