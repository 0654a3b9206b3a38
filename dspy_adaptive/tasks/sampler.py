"""Family-balanced minibatches for AdaptiveGEPA's `batch_sampler` hook (paper Appendix B).

Hook contract: `sampler(examples, size, rng) -> list[int]` (indices into `examples`). A batch of 24
over the four families is 6 per family; within a family that carries `subtask` labels
(LiveBench-IF) the family's share is balanced across its subtasks. Remainders go to groups in an
rng-chosen order, and a group too small for its share passes the shortfall on, so the batch has
min(size, len(examples)) distinct indices. Labels are read here only; they never reach a model.

`FamilyBalancedSampler(epoch=True)` (the default instance `family_balanced_sampler`) draws each
(family, subtask) group epoch-style: it walks an rng-shuffled permutation of the group and
reshuffles only when the group is used up, so every example is seen once before any repeats.
That walk is state kept on the sampler (`state_dict()` / `load_state_dict()` for checkpoints);
everything else is a pure function of the rng. `epoch=False` gives a stateless sampler that
draws without replacement within each batch only — a pure function of the rng state, which
reproduces exactly on resume without saving anything.
"""

from __future__ import annotations

import random
import threading
from typing import Any, Mapping, Sequence

import dspy

GroupKey = tuple[str, str]


def balanced_quotas(n: int, capacity: Mapping[str, int], rng: random.Random) -> dict[str, int]:
    """Split `n` evenly over groups (remainder to groups in a seeded order), respecting capacities.

    A group that cannot fill its share passes the shortfall to groups with room, so the total is
    min(n, sum(capacity)).
    """
    groups = sorted(capacity)
    quota = dict.fromkeys(groups, 0)
    left = min(n, sum(capacity.values()))
    while left > 0:
        open_groups = [g for g in groups if quota[g] < capacity[g]]
        share, rem = divmod(left, len(open_groups))
        extra = rng.sample(open_groups, rem)
        for g in open_groups:
            add = min(share + (g in extra), capacity[g] - quota[g])
            quota[g] += add
            left -= add
    return quota


def _label(ex: Any, key: str) -> Any:
    try:
        return ex.get(key) if hasattr(ex, "get") else getattr(ex, key, None)
    except (AttributeError, KeyError):
        return None


class FamilyBalancedSampler:
    def __init__(self, epoch: bool = True, family_key: str = "family", subtask_key: str = "subtask"):
        self.epoch = epoch
        self.family_key = family_key
        self.subtask_key = subtask_key
        self._queues: dict[GroupKey, list[int]] = {}
        self._fingerprint: tuple | None = None
        self._lock = threading.Lock()

    # -- grouping
    def groups(self, examples: Sequence[dspy.Example]) -> dict[str, dict[str, list[int]]]:
        """family -> subtask ('' when unlabelled) -> indices."""
        out: dict[str, dict[str, list[int]]] = {}
        for i, ex in enumerate(examples):
            fam = _label(ex, self.family_key)
            if fam is None:
                raise ValueError(f"example {i} (id={_label(ex, 'id')!r}) has no {self.family_key!r} label; the "
                                 "family-balanced sampler needs it (use the default sampler for unlabelled data)")
            sub = _label(ex, self.subtask_key)
            out.setdefault(str(fam), {}).setdefault("" if sub is None else str(sub), []).append(i)
        return out

    def quotas(self, examples: Sequence[dspy.Example], size: int, rng: random.Random) -> dict[GroupKey, int]:
        groups = self.groups(examples)
        fam_q = balanced_quotas(size, {f: sum(map(len, subs.values())) for f, subs in groups.items()}, rng)
        out: dict[GroupKey, int] = {}
        for fam in sorted(groups):
            sub_q = balanced_quotas(fam_q[fam], {s: len(ix) for s, ix in groups[fam].items()}, rng)
            out.update({(fam, s): q for s, q in sub_q.items()})
        return out

    # -- drawing
    def __call__(self, examples: Sequence[dspy.Example], size: int, rng: random.Random) -> list[int]:
        if size <= 0:
            raise ValueError(f"minibatch size must be positive, got {size}")
        if not examples:
            raise ValueError("cannot sample a minibatch from an empty feedback set")
        groups = self.groups(examples)
        quotas = self.quotas(examples, size, rng)
        with self._lock:
            if self.epoch:
                fp = tuple(str(_label(ex, "id")) for ex in examples)
                if fp != self._fingerprint:
                    self._fingerprint, self._queues = fp, {}
            batch: list[int] = []
            for key in sorted(quotas):
                members = groups[key[0]][key[1]]
                batch.extend(self._draw(key, members, quotas[key], rng))
        rng.shuffle(batch)
        return batch

    def _draw(self, key: GroupKey, members: list[int], n: int, rng: random.Random) -> list[int]:
        if n <= 0:
            return []
        if not self.epoch:
            return rng.sample(members, n)
        queue = self._queues.get(key, [])
        taken = queue[:n]
        queue = queue[n:]
        if len(taken) < n:  # epoch exhausted: new permutation, without repeating this batch's picks
            fresh = [i for i in rng.sample(members, len(members)) if i not in taken]
            need = n - len(taken)
            taken, queue = taken + fresh[:need], fresh[need:]
        self._queues[key] = queue
        return taken

    # -- checkpointing
    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"fingerprint": list(self._fingerprint or ()),
                    "queues": [[list(k), list(v)] for k, v in self._queues.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._fingerprint = tuple(state.get("fingerprint") or ()) or None
            self._queues = {tuple(k): list(v) for k, v in state.get("queues", [])}


family_balanced_sampler = FamilyBalancedSampler(epoch=True)

__all__ = ["FamilyBalancedSampler", "balanced_quotas", "family_balanced_sampler"]
