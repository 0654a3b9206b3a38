"""Pools of LM endpoints: one `dspy.LM` over several endpoints of one model (e.g. N vLLM replicas),
load-balanced by litellm's Router, with usage recorded per endpoint.

    actor = lm_pool("hosted_vllm/Qwen/Qwen3-8B",
                    ["http://gpu1:8000/v1", "http://gpu2:8000/v1", "http://gpu3:8000/v1"],
                    temperature=0.6, max_tokens=8192)
    AdaptiveGEPA(metric, reflection_lm=..., fast_lm=actor, deep_lm=actor, ...)

Any LM option (actor, fast, deep, reflection, judge) takes such a pool. Each endpoint is an `api_base` string
or a dict of litellm parameters (`api_base`, `api_key`, `rpm`, `tpm`, ...); `routing_strategy` is litellm's
(default "simple-shuffle", which honours rpm/tpm weights; "least-busy", "latency-based-routing", ...). The
Router retries a failed endpoint on another one and cools down an endpoint that keeps failing.
`endpoint_usage(lm)` gives calls and tokens per endpoint; AdaptiveGEPA's run record lists them.

The engine reuses DSPy 3.4.1's LiteLLM request/response conversion (its `_LiteLLMConfig`), so requests and
responses are exactly what `dspy.LM("hosted_vllm/...")` would send and parse; only the call goes through the
Router instead of `litellm.completion`.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Mapping, Sequence

import dspy
from dspy.clients.engines.litellm_engine import _LiteLLMConfig
from dspy.clients.engines.litellm_errors import litellm_errors

POOL_ALIAS = "dspy-adaptive-pool"


class RouterEngine(_LiteLLMConfig):
    """A DSPy engine (`complete(Request) -> Response`) whose calls go through a litellm Router."""

    def __init__(self, model: str, endpoints: Sequence[str | Mapping[str, Any]], *,
                 routing_strategy: str = "simple-shuffle", num_retries: int = 2, **router_kwargs: Any):
        super().__init__(model_type="chat")
        from litellm import Router

        if not endpoints:
            raise ValueError("lm_pool needs at least one endpoint (an api_base string or a dict of litellm "
                             "parameters)")
        deployments = []
        for i, ep in enumerate(endpoints):
            params = {"api_base": ep} if isinstance(ep, str) else dict(ep)
            params.setdefault("model", model)
            deployments.append({"model_name": POOL_ALIAS, "litellm_params": params,
                                "model_info": {"id": f"endpoint-{i}"}})
        self.endpoints = [str(d["litellm_params"].get("api_base") or f"endpoint-{i}")
                          for i, d in enumerate(deployments)]
        self.router = Router(model_list=deployments, routing_strategy=routing_strategy, num_retries=num_retries,
                             **router_kwargs)
        self._usage: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "prompt_tokens": 0,
                                                                      "completion_tokens": 0})
        self._lock = threading.Lock()

    def complete(self, request: Any) -> Any:
        data = self._arguments(request)
        data.pop("num_retries", None)
        data["model"] = POOL_ALIAS
        with litellm_errors(model=request.model):
            raw = self.router.completion(**data)
        self._record(raw)
        return self._response(raw, request)

    def _record(self, raw: Any) -> None:
        hidden = getattr(raw, "_hidden_params", None) or {}
        model_id = str(hidden.get("model_id") or "")
        endpoint = next((ep for i, ep in enumerate(self.endpoints) if model_id == f"endpoint-{i}"),
                        str(hidden.get("api_base") or "unknown"))
        usage = getattr(raw, "usage", None)
        with self._lock:
            entry = self._usage[endpoint]
            entry["calls"] += 1
            entry["prompt_tokens"] += int(getattr(usage, "prompt_tokens", 0) or 0)
            entry["completion_tokens"] += int(getattr(usage, "completion_tokens", 0) or 0)

    def usage(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {ep: dict(v) for ep, v in self._usage.items()}

    def __getstate__(self) -> dict[str, Any]:     # Ray actors and processes rebuild the Router from its config
        return {"model": self.router.model_list[0]["litellm_params"]["model"],
                "endpoints": [d["litellm_params"] for d in self.router.model_list],
                "routing_strategy": self.router.routing_strategy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["model"], state["endpoints"], routing_strategy=state["routing_strategy"])

    def close(self) -> None:
        self._closed = True


def lm_pool(model: str, endpoints: Sequence[str | Mapping[str, Any]], *, routing_strategy: str = "simple-shuffle",
            num_retries: int = 2, **lm_kwargs: Any) -> dspy.LM:
    """One dspy.LM over several endpoints of `model` (see the module docstring)."""
    engine = RouterEngine(model, endpoints, routing_strategy=routing_strategy, num_retries=num_retries)
    return dspy.LM(model, engine=engine, **lm_kwargs)


def endpoint_usage(*lms: Any) -> dict[str, dict[str, int]]:
    """Calls and tokens per endpoint of every pooled LM among `lms` (others are skipped)."""
    out: dict[str, dict[str, int]] = {}
    for lm in lms:
        engine = getattr(lm, "engine", None)
        if isinstance(engine, RouterEngine):
            for ep, counts in engine.usage().items():
                entry = out.setdefault(ep, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0})
                for k, v in counts.items():
                    entry[k] += v
    return out


__all__ = ["RouterEngine", "endpoint_usage", "lm_pool"]
