"""Minibatch sampling from the FEEDBACK set only (never validation).

A `batch_sampler(examples, size, rng) -> list[int]` hook lets a benchmark balance minibatches by
labels the models never see. The default draws without replacement within an epoch, like GEPA's
epoch-shuffled sampler, and is a pure function of the rng state (so resume reproduces it).
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

import dspy

BatchSampler = Callable[[Sequence[dspy.Example], int, random.Random], Sequence[int]]


def uniform_sampler(examples: Sequence[dspy.Example], size: int, rng: random.Random) -> list[int]:
    n = len(examples)
    return rng.sample(range(n), min(size, n))


def sample_minibatch(sampler: BatchSampler, examples: Sequence[dspy.Example], size: int,
                     rng: random.Random) -> list[int]:
    idx = list(sampler(examples, size, rng))
    bad = [i for i in idx if not isinstance(i, int) or not 0 <= i < len(examples)]
    if not idx or bad:
        raise ValueError(f"batch_sampler returned invalid indices {bad[:5] or idx}: it must return a non-empty "
                         f"list of indices into the trainset (0..{len(examples) - 1})")
    return idx
