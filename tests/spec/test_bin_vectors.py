"""The bin step's golden vectors (spec/vectors/bins/): checked in, regenerated here, and
covering every R-BIN rule."""

from __future__ import annotations

import json

from thd_packing.spec.examples import bin_examples, rule_ids
from thd_packing.spec.vectors import generate_bins


def test_bin_vectors_are_up_to_date() -> None:
    """Regenerating from the reference gives exactly the checked-in files."""
    assert generate_bins.main(["--check"]) == 0, (
        "run: python -m thd_packing.spec.vectors.generate_bins")


def test_bin_vectors_cover_every_bin_rule() -> None:
    covered: set[str] = set()
    for path in generate_bins.HERE.glob("*.json"):
        covered.update(json.loads(path.read_text())["rules"])
    rules = {rule for rule in rule_ids() if rule.startswith("R-BIN-")}
    assert len(rules) == 20
    assert not rules - covered, f"bin rules without a golden vector: {sorted(rules - covered)}"
    assert covered <= set(rule_ids())


def test_worked_examples_are_vectors_unchanged() -> None:
    """The spec's hand-written bins are what the checked-in vectors hold."""
    for example in bin_examples():
        vector = json.loads((generate_bins.HERE / f"{example['name']}.json").read_text())
        for key in ("bins", "fates", "error", "ranks"):
            assert vector.get(key) == example.get(key), (example["name"], key)
