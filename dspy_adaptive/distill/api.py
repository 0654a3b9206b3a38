"""`distill_router`: label requests with the LM router, train a distilled router, serve with it; and measuring it.

Labels are the optimized LM router's decisions as the program acts on them: its answer resolved the way
every call resolves it (an answer that is no active slot, or names a slot whose program does not compile,
is the fallback, 0).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import dspy

from dspy_adaptive.distill import serve
from dspy_adaptive.distill.model import DistilledRouter, DistilledRouterError
from dspy_adaptive.distill.text import request_text
from dspy_adaptive.distill.train import DistillError, DistillSettings, train_router
from dspy_adaptive.lm.usage import UsageMeter

#: a dspy_adaptive.program.routed.RoutedProgram (not imported: it imports this package)
RoutedProgram = Any



def request_inputs(request: Any, input_names: Sequence[str]) -> dict[str, Any]:
    """A request's input fields: a dspy.Example (its inputs), a mapping, or a text (the single input field)."""
    if isinstance(request, dspy.Example):
        keys = request._input_keys or input_names
        return {k: request[k] for k in keys if k in request}
    if isinstance(request, Mapping):
        return dict(request)
    if isinstance(request, str):
        if len(input_names) != 1:
            raise ValueError(f"a plain-text request needs a program with one input field, not {list(input_names)}")
        return {input_names[0]: request}
    raise TypeError(f"a request is a dspy.Example, a dict of input fields or a text, got {type(request).__name__}")


@dataclass(frozen=True)
class LMDecision:
    """The LM router's decision for one request, what it cost and how long it took."""

    slot: int                      # the resolved slot (0 = the fallback)
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def lm_decision(routed: "RoutedProgram", inputs: Mapping[str, Any]) -> LMDecision:
    """Ask the LM router (never the distilled one) for a request's slot, metering its calls and tokens."""
    meter = UsageMeter()
    with meter.active():
        t0 = time.perf_counter()
        selected, answer = routed._route(dict(inputs))
        seconds = time.perf_counter() - t0
    slot, _ = routed._resolve(selected, answer)
    used = meter.snapshot().get("router", {})
    return LMDecision(int(slot), int(used.get("calls", 0)), int(used.get("prompt_tokens", 0)),
                      int(used.get("completion_tokens", 0)), seconds)


def _parallel(fn, items: Sequence[Any], num_threads: int | None) -> list[Any]:
    from dspy.utils.parallelizer import ParallelExecutor

    threads = num_threads or dspy.settings.num_threads or 8
    return ParallelExecutor(num_threads=threads, disable_progress_bar=True, max_errors=10 ** 9).execute(fn, list(items))


def _failures(results: Sequence[Any]) -> list[BaseException]:
    return [r for r in results if isinstance(r, BaseException) or r is None]


def label_requests(routed: "RoutedProgram", requests: Sequence[Mapping[str, Any]],
                   num_threads: int | None = None) -> list[LMDecision | None]:
    """The LM router's decisions on `requests` (input dicts), in order; None where the LM router failed."""
    results = _parallel(lambda inputs: lm_decision(routed, inputs), requests, num_threads)
    return [r if isinstance(r, LMDecision) else None for r in results]


def usage_of(decisions: Sequence[LMDecision]) -> dict[str, Any]:
    n = len(decisions)
    calls = sum(d.calls for d in decisions)
    tokens = sum(d.tokens for d in decisions)
    metered = [d for d in decisions if d.calls]
    return {"requests": n, "router_calls": calls, "router_tokens": tokens,
            "tokens_per_call": tokens / len(metered) if metered else None,
            "mean_ms": 1000.0 * sum(d.seconds for d in decisions) / n if n else None}


def distill_router(routed: "RoutedProgram", requests: Sequence[Any] = (), settings: DistillSettings | None = None,
                   **options: Any) -> DistilledRouter:
    """Distill `routed`'s LM router into a calibrated classifier and serve `routed` with it.

    Args:
        routed: the optimized program.
        requests: requests to learn from -- the train and validation sets, plus any unlabeled requests (logged
            traffic): dspy.Examples, dicts of input fields, or texts (single-input programs).
        settings: `DistillSettings`; keyword options override its fields (threshold=..., candidates=...).

    Returns:
        The `DistilledRouter` now serving `routed` (also `routed.distilled_router`); its `training` holds the
        held-out figures and the cost of labelling (`labelling`).

    Raises:
        DistillError: when no distilled router could be built (too few requests or slots, no threshold
            reaching the target agreement); the program keeps its LM router.
    """
    from dataclasses import replace

    settings = replace(settings or DistillSettings(), **options) if options else (settings or DistillSettings())
    items = list(requests) + list(settings.requests)
    if not items:
        raise ValueError("distill_router needs requests to learn from (e.g. trainset + valset)")
    names = tuple(routed.input_names or ())
    if not names:
        first = request_inputs(items[0], ("request",))
        names = tuple(first)
    inputs = [request_inputs(r, names) for r in items]
    previous = routed.distilled_router
    routed.use_distilled_router(None)                    # the LM router labels, whatever served before
    try:
        t0 = time.perf_counter()
        answered = label_requests(routed, inputs, settings.num_threads)
        label_seconds = time.perf_counter() - t0
        failed = sum(d is None for d in answered)
        if failed == len(answered):
            raise DistillError(f"the LM router failed on every one of the {failed} requests (see the log)")
        decisions = [d for d in answered if d is not None]
        texts = [request_text(i, names) for i, d in zip(inputs, answered) if d is not None]
        binding = serve.binding_of(routed, names)
        t1 = time.perf_counter()
        model = train_router(texts, [d.slot for d in decisions], binding, settings)
        train_seconds = time.perf_counter() - t1
    except BaseException:
        if previous is not None:
            try:                                          # put back what served before, if it still can
                routed.use_distilled_router(previous)
            except DistilledRouterError:
                pass
        raise
    t2 = time.perf_counter()
    model.decide_texts(texts[:200])
    classify_ms = 1000.0 * (time.perf_counter() - t2) / max(1, min(200, len(texts)))
    model.training["labelling"] = {**usage_of(decisions), "failed": failed, "seconds": round(label_seconds, 3)}
    model.training["train_seconds"] = round(train_seconds, 3)
    model.training["classifier_ms_per_request"] = round(classify_ms, 4)
    routed.use_distilled_router(model)
    return model


# -- measuring it on requests it did not learn from --------------------------------------------------------

@dataclass(frozen=True)
class RoutingComparison:
    """The distilled router (with its LM-router fallback) against the LM router on the same requests."""

    requests: int
    agreement: float                 # served slot == the LM router's slot
    classifier_agreement: float      # the classifier's own top slot == the LM router's slot (every request)
    share_lm_router: float           # requests under the threshold, still sent to the LM router
    router_calls_lm: int             # LM router calls when the LM router serves every request
    router_calls_distilled: int      # LM router calls with the distilled router serving
    router_tokens_lm: int
    router_tokens_distilled: int
    latency_ms_lm: float             # mean routing time per request, LM router
    latency_ms_distilled: float      # mean routing time per request, distilled (+ LM router when under threshold)
    threshold: float
    per_request: list[dict[str, Any]] = field(default_factory=list)

    @property
    def router_calls_saved(self) -> int:
        return self.router_calls_lm - self.router_calls_distilled

    @property
    def router_tokens_saved(self) -> int:
        return self.router_tokens_lm - self.router_tokens_distilled

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "router_calls_saved": self.router_calls_saved,
                "router_tokens_saved": self.router_tokens_saved}


def compare_routing(routed: "RoutedProgram", requests: Sequence[Any], num_threads: int = 1,
                    ids: Sequence[str] | None = None) -> RoutingComparison:
    """Route every request both ways: the LM router alone, and the distilled router (the LM router below its
    threshold). The LM router is asked once per request; a request the distilled router answers saves that
    call, and one under the threshold pays the classifier and that call. One request at a time by default,
    so the latencies are a single request's (threads share the CPU with the classifier)."""
    d = routed.distilled_router
    if d is None:
        raise ValueError("the program has no distilled router: call routed.distill_router(requests) first")
    names = d.binding.input_names
    inputs = [request_inputs(r, names) for r in requests]

    def one(item: Mapping[str, Any]) -> dict[str, Any]:
        lm = lm_decision(routed, item)
        t0 = time.perf_counter()
        dec = d.decide(item)
        classify = time.perf_counter() - t0
        slot = routed._resolve(dec.slot, None)[0] if dec.accepted else lm.slot
        return {"lm": lm.slot, "distilled": dec.slot, "served": int(slot), "confidence": round(dec.confidence, 6),
                "deferred": not dec.accepted, "lm_calls": lm.calls, "lm_tokens": lm.tokens,
                "lm_ms": 1000.0 * lm.seconds,
                "served_ms": 1000.0 * (classify + (0.0 if dec.accepted else lm.seconds))}

    rows = _parallel(one, inputs, num_threads)
    failures = _failures(rows)
    if failures:
        raise RuntimeError(f"routing failed on {len(failures)} of {len(rows)} requests: {failures[0]!r}")
    for i, row in enumerate(rows):
        row["id"] = str(ids[i]) if ids is not None else str(i)
    n = len(rows)
    if n == 0:
        raise ValueError("compare_routing needs at least one request")
    return RoutingComparison(
        requests=n, agreement=sum(r["served"] == r["lm"] for r in rows) / n,
        classifier_agreement=sum(r["distilled"] == r["lm"] for r in rows) / n,
        share_lm_router=sum(r["deferred"] for r in rows) / n,
        router_calls_lm=sum(r["lm_calls"] for r in rows),
        router_calls_distilled=sum(r["lm_calls"] for r in rows if r["deferred"]),
        router_tokens_lm=sum(r["lm_tokens"] for r in rows),
        router_tokens_distilled=sum(r["lm_tokens"] for r in rows if r["deferred"]),
        latency_ms_lm=sum(r["lm_ms"] for r in rows) / n, latency_ms_distilled=sum(r["served_ms"] for r in rows) / n,
        threshold=d.threshold, per_request=rows)


__all__ = ["LMDecision", "RoutingComparison", "compare_routing", "distill_router", "label_requests", "lm_decision",
           "request_inputs", "usage_of"]
