"""Micro-batching for the planner: how a data loader splits a stream of samples by a token budget.

Both keep every sample exactly once and refuse a sample longer than the budget, naming it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable


def greedy_microbatches(lengths: Iterable[int], budget: int, limit: int) -> list[list[int]]:
    """Sequential greedy packing: append samples in order while the real tokens fit the budget.

    This is what a data loader that never reorders does. At most ``limit`` micro-batches.
    """
    _check_budget(budget, limit)
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for index, length in enumerate(lengths):
        _check_fits(index, length, budget)
        if current and tokens + length > budget:
            batches.append(current)
            if len(batches) == limit:
                return batches
            current, tokens = [], 0
        current.append(length)
        tokens += length
    if current and len(batches) < limit:
        batches.append(current)
    return batches


def balanced_microbatches(lengths: Iterable[int], budget: int, limit: int,
                          window: int = 256) -> list[list[int]]:
    """Balanced packing, as dynamic-batch-size trainers do for each mini-batch.

    Every ``window`` samples (one mini-batch) are split into the fewest micro-batches ``k >=
    ceil(tokens / budget)`` for which a longest-first, least-loaded assignment keeps each under
    the budget. Samples keep their original order inside a micro-batch.
    """
    _check_budget(budget, limit)
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    batches: list[list[int]] = []
    iterator = iter(lengths)
    offset = 0
    while len(batches) < limit:
        chunk = list(itertools.islice(iterator, window))
        if not chunk:
            break
        for index, length in enumerate(chunk):
            _check_fits(offset + index, length, budget)
        offset += len(chunk)
        batches.extend(_balance(chunk, budget))
    return batches[:limit]


def _balance(chunk: list[int], budget: int) -> list[list[int]]:
    order = sorted(range(len(chunk)), key=lambda i: -chunk[i])
    k = max(1, math.ceil(sum(chunk) / budget))
    while True:
        loads = [0] * k
        members: list[list[int]] = [[] for _ in range(k)]
        for i in order:
            target = min(range(k), key=loads.__getitem__)
            loads[target] += chunk[i]
            members[target].append(i)
        if max(loads) <= budget:
            return [[chunk[i] for i in sorted(m)] for m in members if m]
        k += 1


def _check_budget(budget: int, limit: int) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"tokens per micro-batch must be an integer >= 1, got {budget!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"number of micro-batches must be an integer >= 1, got {limit!r}")


def _check_fits(index: int, length: int, budget: int) -> None:
    if length > budget:
        raise ValueError(
            f"sample {index} has {length} tokens, more than the token budget {budget} per "
            f"micro-batch; raise --tokens-per-mb"
        )
