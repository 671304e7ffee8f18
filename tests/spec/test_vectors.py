"""Golden vectors (spec/vectors/): checked in, regenerated here, and covering every rule."""

from __future__ import annotations

import json

from thd_packing.spec.examples import rule_ids, vector_files
from thd_packing.spec.vectors import generate

# Rules about the Megatron adapter bind impl/megatron.py and upstream verl, not the reference;
# tests/impl and the conformance suite check them.
ADAPTER_ONLY = {rule for rule in rule_ids() if rule.startswith("R-MEG-")}  # spec section 12
# Spec §1a: devices; golden vectors are NumPy arrays, which live on the host.
DEVICE_ONLY = {rule for rule in rule_ids() if rule.startswith("R-DEV-")}
# The consumer contract (spec §12a) holds for packs of any convention; a golden vector fixes the
# outputs of one. conformance/test_contract.py checks it on every target's own outputs, and
# tests/conformance/test_contract_checks.py shows each check failing on a broken pack.
CONTRACT = "R-CONSUMER-"
# The model tier (spec §12c) judges a pack by a model's outputs on it, which no golden vector
# holds; conformance/test_model.py checks it on every target, tests/suite/test_model_tier.py
# shows each check failing on a broken pack.
MODEL = "R-MODEL-"
# The bin step (spec/bins.md) has vectors of its own, spec/vectors/bins/, which
# tests/spec/test_bin_vectors.py checks.
BINS = "R-BIN-"


def test_vectors_are_up_to_date() -> None:
    """Regenerating from the reference gives exactly the checked-in files."""
    assert generate.main(["--check"]) == 0, "run: python -m spec.vectors.generate"


def test_vectors_cover_every_rule() -> None:
    covered: set[str] = set()
    for path in vector_files():
        covered.update(json.loads(path.read_text())["rules"])
    missing = ({r for r in rule_ids() if not r.startswith((CONTRACT, MODEL, BINS))} - ADAPTER_ONLY
               - DEVICE_ONLY - covered)
    assert not missing, f"rules without a golden vector: {sorted(missing)}"
    assert not covered - set(rule_ids()), "vectors cite rules the spec does not define"


def test_every_rejection_names_a_builtin_error() -> None:
    errors = set()
    for path in vector_files():
        vector = json.loads(path.read_text())
        if "error" in vector:
            errors.add(vector["error"])
    assert errors == {"TypeError", "ValueError", "RuntimeError", "NotImplementedError"}
