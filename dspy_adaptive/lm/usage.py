"""The cost ledger: LM calls, tokens and USD per role (router, specialist, fallback, reflection, metric).

DSPy's LM layer calls `settings.usage_tracker.add_usage(model, usage)` after every uncached call.
`role(name)` installs a tiny tracker that files that usage under `name` in the active `UsageMeter`;
with no meter active it does nothing, so RoutedProgram outside a search pays nothing.

DSPy does not hand the tracker a price, so each call is priced here from its model name and token counts
with DSPy's own model metadata (litellm's public price map, which DSPy loads to price its calls; offline, set
LITELLM_LOCAL_MODEL_COST_MAP=True as for DSPy). A model without a price there (a local or scripted model) costs
0 and is listed in `unpriced_models`. Cached calls are free: DSPy reports no usage for them. Prices are list
prices per token (cached-token discounts are not applied): an estimate to steer by, not an invoice.

A meter can have a parent: `meter.child()` opens a meter that also adds everything it records to its
parent, so the search keeps one ledger per proposal while the run's ledger stays whole.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections import defaultdict
from typing import Any, Iterator

import dspy

_meter: contextvars.ContextVar["UsageMeter | None"] = contextvars.ContextVar("adaptive_usage_meter", default=None)

ROLES = ("router", "specialist", "fallback", "reflection", "metric")


def _empty() -> dict[str, float]:
    return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0, "unpriced_calls": 0}


_PRICES: dict[str, tuple[float, float] | None] = {}


def _unit_prices(model: str) -> tuple[float, float] | None:
    """(USD per prompt token, USD per completion token) of `model` from DSPy's own model metadata (the map DSPy
    prices its calls with), or None. Read only once DSPy has loaded that map itself -- it does on its first
    priced call -- so pricing here never causes a download or a file read of its own (a scripted or local
    model, which DSPy does not price, stays unpriced)."""
    hit = _PRICES.get(model, False)
    if hit is not False:
        return hit
    try:
        from dspy.clients import model_metadata
    except ImportError:  # pragma: no cover - another dspy
        return None
    data = getattr(model_metadata, "_data", None)
    if data is None:
        return None
    info: dict = {}
    try:
        if "/" in model:
            provider, name = model.split("/", 1)
            info = model_metadata.model_info(provider, name) or {}
        if not info and isinstance(data.get(model), dict):
            info = data[model]
        prompt, completion = info.get("input_cost_per_token"), info.get("output_cost_per_token")
        prices = (float(prompt), float(completion)) if prompt is not None and completion is not None else None
    except Exception:  # noqa: BLE001 - malformed metadata: not priced
        prices = None
    _PRICES[model] = prices
    return prices


def price(model: str | None, usage: dict[str, Any]) -> float | None:
    """USD for one call's `usage` on `model` (a `cost` the usage already carries wins); None: not priced."""
    if usage.get("cost") is not None:
        try:
            return float(usage["cost"])
        except (TypeError, ValueError):
            pass
    if not model:
        return None
    prices = _unit_prices(str(model))
    if prices is None:
        return None
    return int(usage.get("prompt_tokens") or 0) * prices[0] + int(usage.get("completion_tokens") or 0) * prices[1]


class UsageMeter:
    """Thread-safe counters: calls, prompt/completion tokens and cost (USD) per role."""

    def __init__(self, parent: "UsageMeter | None" = None) -> None:
        self._lock = threading.Lock()
        self._by_role: dict[str, dict[str, float]] = defaultdict(_empty)
        self.parent = parent
        self.unpriced_models: set[str] = set()

    def add(self, role_name: str, usage: dict[str, Any], model: str | None = None) -> None:
        cost = price(model, usage)
        self._add(role_name, usage, cost, model)

    def _add(self, role_name: str, usage: dict[str, Any], cost: float | None, model: str | None) -> None:
        with self._lock:
            entry = self._by_role[role_name]
            entry["calls"] += 1
            entry["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            entry["completion_tokens"] += int(usage.get("completion_tokens") or 0)
            entry["cost"] += cost or 0.0
            if cost is None:
                entry["unpriced_calls"] += 1
                if model:
                    self.unpriced_models.add(str(model))
        if self.parent is not None:
            self.parent._add(role_name, usage, cost, model)

    def restore(self, counts: dict[str, dict[str, float]]) -> None:
        """Counters from a checkpoint (resume)."""
        with self._lock:
            for role_name, c in counts.items():
                self._by_role[role_name].update(c)

    def merge(self, counts: dict[str, dict[str, float]]) -> None:
        """Add another meter's snapshot (e.g. a Ray actor's) to this one and its parents."""
        with self._lock:
            for role_name, c in counts.items():
                entry = self._by_role[role_name]
                for k in entry:
                    entry[k] += c.get(k, 0)
        if self.parent is not None:
            self.parent.merge(counts)

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {r: dict(v) for r, v in sorted(self._by_role.items())}

    def total_cost(self) -> float:
        with self._lock:
            return sum(v["cost"] for v in self._by_role.values())

    def shown_cost(self) -> float | None:
        """The USD to show people: None while every call so far was to a model without a list price (a local or
        scripted model), where "$0.0000" would read as free rather than unpriced."""
        with self._lock:
            calls = sum(v["calls"] for v in self._by_role.values())
            unpriced = sum(v.get("unpriced_calls", 0) for v in self._by_role.values())
            cost = sum(v["cost"] for v in self._by_role.values())
        return None if calls and unpriced >= calls and not cost else cost

    def totals(self) -> dict[str, float]:
        """Calls, tokens and cost summed over every role."""
        out = _empty()
        with self._lock:
            for v in self._by_role.values():
                for k in out:
                    out[k] += v[k]
        return out

    @contextlib.contextmanager
    def active(self) -> Iterator["UsageMeter"]:
        token = _meter.set(self)
        try:
            yield self
        finally:
            _meter.reset(token)

    @contextlib.contextmanager
    def child(self) -> Iterator["UsageMeter"]:
        """A fresh meter, active in this block, that also adds everything to this one."""
        sub = UsageMeter(parent=self)
        with sub.active():
            yield sub


def current_meter() -> UsageMeter | None:
    return _meter.get()


class _RoleTracker:
    def __init__(self, meter: UsageMeter, role_name: str):
        self.meter, self.role_name = meter, role_name

    def add_usage(self, lm: str, usage_entry: dict[str, Any]) -> None:
        self.meter.add(self.role_name, usage_entry or {}, model=lm)

    def __deepcopy__(self, memo):  # dspy may deep-copy trackers across threads; keep ours shared
        return self


@contextlib.contextmanager
def role(role_name: str) -> Iterator[None]:
    """File LM usage inside this block under `role_name` (no-op without an active meter)."""
    meter = _meter.get()
    if meter is None:
        yield
        return
    with dspy.context(usage_tracker=_RoleTracker(meter, role_name)):
        yield


__all__ = ["ROLES", "UsageMeter", "current_meter", "price", "role"]
