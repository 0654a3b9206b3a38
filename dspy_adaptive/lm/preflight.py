"""Fail before spending: every LM role of a run is checked before its first scored call, and a run whose first
scored calls all fail for a configuration reason stops at once, naming the role, the model and the fix; so does a
run whose metric faulted on every call of its first evaluation, showing the fault.

* `lm_roles(...)` lists a run's LMs by the role they play: `fast_lm` (the router and fast specialists), `deep_lm`
  (your program, the fallback, and deep specialists), the reflection LM, LMs set on your program's own
  predictors, and LMs the metric holds (a judge; found among its attributes, a few levels deep). A role left
  None is played by the configured LM (`dspy.configure(lm=...)`), checked as that role.
* `check_lms(roles)` first refuses, without calling anything, a role with no LM and a role whose value is not an
  LM DSPy can call (`usable_lm`: a `dspy.BaseLM`, e.g. `dspy.LM("openai/gpt-4.1")`; not the model's name as a
  string, not a plain function str -> str -- dspy.GEPA 3.4 calls its reflection LM through DSPy too), naming the
  role, what was given and how to pass it. Then it makes one short call ("Reply with the word OK.") on each
  distinct LM that a provider serves (a `dspy.LM` with a model string: keys, model names and endpoints are
  checked the way the provider checks them; DSPy refuses a missing key locally, before any request), with no
  retries and no cache. An LM with an engine of its own (the local GGUF engine, scripted LMs) or another `BaseLM`
  is not called: it has no provider configuration to check, and a call could change what it answers next. These
  calls are not scored calls.
* `FirstCallsGuard` watches a session's first scored calls: while every one of them failed for a configuration
  reason (authentication, a missing key, an unknown model, a refused connection) they are held back, and once
  `limit` have (or a whole first evaluation has), the run stops with `LMSetupError`. DSPy's own refusal of an LM
  that is not one ("LM must be an instance of `dspy.BaseLM`", "No LM is loaded": plain ValueErrors) counts as
  such a reason. Likewise it holds back calls whose metric faulted (raised, or returned something that is not a
  score): when every call of the session's first evaluation (the seed validation) is a metric fault, the run
  stops there with `MetricFaultError`, before any reflection -- a metric that scores 0.0 is not a fault. The
  calls it held are not logged or charged: they produced nothing usable, and the corrected rerun starts fresh.
  The first call that fails otherwise or not at all releases them.

`LMSetupError` is a `dspy.LMConfigurationError`, so code catching DSPy's LM errors catches it too;
`MetricFaultError` is an `InputError` (a ValueError).
"""

from __future__ import annotations

import re
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import dspy
from dspy.utils.exceptions import LMConfigurationError

from dspy_adaptive.data import InputError
from dspy_adaptive.schema import RowResult

PROBE_PROMPT = "Reply with the word OK."

# Exception class names (any class in an exception's MRO, or a row's recorded error kind) by configuration reason.
_REASON_BY_CLASS = {
    "LMNotConfiguredError": "not configured", "NotConfiguredError": "not configured",
    "MissingCredentialError": "not configured", "LMConfigurationError": "not configured",
    "LMAuthError": "authentication", "AuthenticationError": "authentication", "AuthError": "authentication",
    "PermissionDeniedError": "authentication", "LMBillingError": "billing", "BillingError": "billing",
    "LMUnsupportedModelError": "model not found", "UnsupportedModelError": "model not found",
    "NotFoundError": "model not found", "UnknownModelError": "model not found",
    "LMTransportError": "connection", "TransportError": "connection", "APIConnectionError": "connection",
    "ConnectionRefusedError": "connection", "ConnectionError": "connection",
}
# A bad request is a configuration fault only when it says the model or provider is unknown.
_MODEL_UNKNOWN = re.compile(r"LLM Provider NOT provided|model[_ ]not[_ ]found|does not exist|unknown model|"
                            r"invalid model|no such model|model .{0,80} not found", re.I)
_BAD_REQUEST = {"LMInvalidRequestError", "InvalidRequestError", "BadRequestError"}
# DSPy refuses a value that is not an LM with a plain ValueError (dspy.Predict, before any request).
_NOT_AN_LM = re.compile(r"LM must be (?:an instance of `?dspy\.BaseLM|a dspy\.BaseLM)")
_NO_LM = re.compile(r"No LM is loaded")
NOT_AN_LM = "not a dspy.BaseLM"
_MODEL_PREFIX = re.compile(r"\[([^\]\s]{1,200})\]")

FIXES = {
    "not configured": "set the provider's API key (e.g. OPENAI_API_KEY) in the environment or pass api_key= to "
                      "dspy.LM(...)",
    "authentication": "check the API key: the provider refused it (expired, revoked, or for another account)",
    "billing": "the provider refused the account's billing or quota: add credit or use another key",
    "model not found": "check the model name (litellm's form is provider/model, e.g. openai/gpt-4.1-mini) and "
                       "that your key may use it",
    "connection": "start the server or correct api_base: nothing answered at the LM's address",
    NOT_AN_LM: "pass an LM object, e.g. dspy.LM(\"openai/gpt-4.1-mini\"), not the model's name as a string: "
               "dspy.configure(lm=dspy.LM(...)), fast_lm=dspy.LM(...), reflection_lm=dspy.LM(...)",
}


def configuration_reason(kinds: Iterable[str], message: str = "") -> str | None:
    """The configuration reason an error names -- "not configured", "authentication", "billing", "model not
    found", "connection" -- or None when it is not a configuration fault (a timeout, a rate limit, a server
    error, a parse failure: the run may go on). `kinds`: exception class names (an exception's MRO, or a row's
    recorded error kind)."""
    kinds = list(kinds)
    if "ValueError" in kinds and message:
        if _NOT_AN_LM.search(message):
            return NOT_AN_LM
        if _NO_LM.search(message):
            return "not configured"
    if any(k in _BAD_REQUEST for k in kinds):
        return "model not found" if _MODEL_UNKNOWN.search(message or "") else None
    for k in kinds:
        if k in _REASON_BY_CLASS:
            return _REASON_BY_CLASS[k]
    return None


def exception_reason(exc: BaseException) -> str | None:
    return configuration_reason([c.__name__ for c in type(exc).__mro__], str(exc))


@dataclass(frozen=True)
class LMRole:
    """An LM of a run and the role it plays there (`role` as people read it: "deep_lm (your program)"), and how
    one sets it (`setting`, with {} for the LM: "reflection_lm={}", "dspy.configure(lm={})")."""

    role: str
    lm: Any
    setting: str = ""

    @property
    def model(self) -> str | None:
        model = getattr(self.lm, "model", None)
        return str(model) if model is not None else None


class LMSetupError(LMConfigurationError):
    """An LM of the run cannot be used (no key, a refused key, an unknown model, nothing at its address): the run
    stopped before spending its budget. `role`, `model`, `reason` and `fix` say which LM, why and what to do."""

    def __init__(self, role: str, model: str | None, reason: str, detail: str, *, when: str,
                 others: Sequence[str] = (), fix: str | None = None, given: str | None = None):
        self.role, self.reason, self.detail = role, reason, detail
        self.fix = fix or FIXES.get(reason, "check the LM's settings")
        text = (f"{role}: {given or model or 'no LM'} is not usable ({reason}): {detail.strip()}\n"
                f"Fix: {self.fix}.\n{when}")
        if others:
            text += "\nAlso failing: " + "; ".join(others)
        super().__init__(text, model=None)
        self.model = model


def lm_roles(*, fast_lm: Any, deep_lm: Any, student: Any = None, metric: Any = None,
             extra: Mapping[str, Any] | None = None) -> list[LMRole]:
    """The run's LMs by role (None profiles resolve to the configured LM, as the routed program resolves them)."""
    configured = dspy.settings.lm
    roles = [LMRole("fast_lm (router, fast specialists)" + ("" if fast_lm is not None else "; the configured LM"),
                    fast_lm if fast_lm is not None else configured,
                    "fast_lm={}" if fast_lm is not None else "dspy.configure(lm={})"),
             LMRole("deep_lm (your program as the fallback, deep specialists)"
                    + ("" if deep_lm is not None else "; the configured LM"),
                    deep_lm if deep_lm is not None else configured,
                    "deep_lm={}" if deep_lm is not None else "dspy.configure(lm={})")]
    if student is not None and hasattr(student, "named_predictors"):
        roles += [LMRole(f"your program's {name}.lm", p.lm,
                         "your_program.lm = {}" if name == "self" else f"your_program.{name}.lm = {{}}")
                  for name, p in student.named_predictors() if getattr(p, "lm", None) is not None]
    roles += [LMRole(name, lm, f"{name.split()[0]}={{}}") for name, lm in (extra or {}).items() if lm is not None]
    if metric is not None:
        roles += [LMRole(f"the metric's {path}", lm) for path, lm in lms_inside(metric)]
    return roles


def lms_inside(obj: Any, depth: int = 3) -> list[tuple[str, Any]]:
    """(attribute path, LM) for every BaseLM `obj` holds among its attributes, mappings and sequences (a metric's
    judge: `metrics['pupa'].judge_lm`)."""
    return _lms_inside(obj, "", depth, set())


def _lms_inside(obj: Any, path: str, depth: int, seen: set[int]) -> list[tuple[str, Any]]:
    """(attribute path, LM) for every BaseLM among `obj`'s attributes, mappings and sequences, `depth` deep."""
    if depth < 0 or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return []
    seen.add(id(obj))
    if isinstance(obj, dspy.BaseLM):
        return [(path or "lm", obj)]
    if isinstance(obj, Mapping):
        items = [(f"{path}[{k!r}]", v) for k, v in list(obj.items())[:32]]
    elif isinstance(obj, (list, tuple)):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(obj[:32])]
    else:
        try:
            attrs = vars(obj)
        except TypeError:
            return []
        items = [(f"{path}.{k}" if path else k, v) for k, v in list(attrs.items())[:64] if not k.startswith("__")]
    out: list[tuple[str, Any]] = []
    for p, v in items:
        out += _lms_inside(v, p, depth - 1, seen)
    return out


def usable_lm(lm: Any) -> bool:
    """An LM DSPy can call: a `dspy.BaseLM` (or a client DSPy's Predict accepts as one: a decision-request client).
    The model's name as a string, a function, a class are not."""
    if isinstance(lm, type):
        return False
    return isinstance(lm, dspy.BaseLM) or getattr(lm, "supports_decision_requests", False) is True


def given(value: Any) -> str:
    """What was given for an LM role, as an error shows it: "the string 'openai/gpt-4.1'", "a function (<lambda>)"."""
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__} (not an instance of it)"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and name:
        return f"a {type(value).__name__} ({name})"
    return f"a value of type {type(value).__qualname__} ({repr(value)[:80]})"


def _not_an_lm(group: Sequence[LMRole]) -> LMSetupError:
    """The error for roles whose value (one object) is not an LM: which roles, what was given, how to pass one."""
    value = group[0].lm
    example = f'dspy.LM("{value}")' if isinstance(value, str) and value.strip() else 'dspy.LM("openai/gpt-4.1-mini")'
    if isinstance(value, str):
        detail = ("the string is a model's name, and every LM role needs an LM object: a dspy.BaseLM such as "
                  "dspy.LM(...), with the name inside it")
    else:
        detail = "every LM role needs an LM object: a dspy.BaseLM such as dspy.LM(...)"
    if callable(value) and not isinstance(value, type):
        detail += (". A plain function str -> str (gepa's LanguageModel protocol) is not accepted: Adaptive-GEPA, "
                   "like dspy.GEPA 3.4, calls every LM through DSPy's adapters. Pass a dspy.LM, or give your own "
                   "model to one through DSPy's engine API: dspy.LM(\"<name>\", engine=<an object with "
                   "complete(Request) -> Response>)")
    settings = list(dict.fromkeys(r.setting for r in group if r.setting))
    fix = ("use " + " and ".join(s.format(example) for s in settings)) if settings else None
    return LMSetupError(" and ".join(r.role for r in group), value if isinstance(value, str) else None, NOT_AN_LM,
                        detail, fix=fix, given=repr(value) if isinstance(value, str) else given(value),
                        when="Checked before the first scored call: nothing was scored or charged.")


def provider_served(lm: Any) -> bool:
    """A `dspy.LM` that a provider serves (its engine is chosen from the model string), not one with an engine of
    its own (local GGUF, scripted) and not another BaseLM."""
    return isinstance(lm, dspy.LM) and isinstance(getattr(lm, "engine", None), str)


def check_lms(roles: Sequence[LMRole], *, call: Callable[[Any], Any] | None = None) -> None:
    """Check every role before the first scored call (see the module docstring); raises `LMSetupError` for the
    first role whose LM is missing, is not an LM (`usable_lm`), or whose provider refuses it. `call(lm)` makes the
    check call (tests)."""
    for r in roles:
        if r.lm is None:
            raise LMSetupError(r.role, None, "not configured", "no LM is set for this role and none is configured",
                               fix="pass it (fast_lm=, deep_lm=, reflection_lm=) or call dspy.configure(lm=...)",
                               when="Checked before the first scored call: nothing was scored or charged.")
    unusable: dict[int, list[LMRole]] = {}
    for r in roles:
        if not usable_lm(r.lm):
            unusable.setdefault(id(r.lm), []).append(r)
    if unusable:
        raise _not_an_lm(next(iter(unusable.values())))
    distinct: dict[int, list[LMRole]] = {}
    for r in roles:
        if provider_served(r.lm):
            distinct.setdefault(id(r.lm), []).append(r)
    if not distinct:
        return
    call = call or _probe
    groups = list(distinct.values())
    with ThreadPoolExecutor(max_workers=min(8, len(groups)), thread_name_prefix="lm-check") as pool:
        outcomes = list(pool.map(lambda g: _outcome(call, g[0].lm), groups))
    failed = [(g, exc, exception_reason(exc)) for g, exc in zip(groups, outcomes) if exc is not None]
    for group, exc, reason in failed:
        same = [r.role for g, _, why in failed for r in g if why == reason and g[0].model == group[0].model]
        names = " and ".join(same if reason is not None else [r.role for r in group])
        if reason is None:
            warnings.warn(f"could not check the {names} LM ({group[0].model}): {type(exc).__name__}: "
                          f"{str(exc)[:300]}; the run goes on (it stops early if its first scored calls fail for a "
                          "configuration reason)", RuntimeWarning, stacklevel=3)
            continue
        raise LMSetupError(names, group[0].model, reason, f"{type(exc).__name__}: {str(exc)[:600]}",
                           when="Checked before the first scored call: nothing was scored or charged.") from exc


def _outcome(call: Callable[[Any], Any], lm: Any) -> BaseException | None:
    try:
        call(lm)
    except Exception as exc:  # noqa: BLE001 - classified by the caller
        return exc
    return None


def _probe(lm: Any) -> Any:
    return lm.copy(num_retries=0, cache=False)(PROBE_PROMPT)


# -- the first scored calls of a session -------------------------------------------------------------------------

METRIC_FAULT = "metric fault"


class MetricFaultError(InputError):
    """The metric faulted -- raised, or returned something that is not a score -- on every scored call of the
    run's first evaluation (the seed validation), so no score could guide the search: the run stopped before any
    reflection. `fault` is the first call's fault as recorded ("metric raised AttributeError: ..."), `calls` how
    many calls faulted. A metric that returns 0.0 is not a fault."""

    def __init__(self, results: Sequence[RowResult]):
        first = results[0]
        self.fault, self.calls = first.metric_note or "", len(results)
        fields = ", ".join(first.output or {})
        text = (f"The metric failed on all {self.calls} scored calls of the run's first evaluation: {self.fault}.\n"
                "Fix the metric: it must not raise, and must return a number (float, int or bool) or "
                "dspy.Prediction(score=<number>, feedback=...) for every (gold, pred); a score of 0.0 is fine"
                + (f". The program's predictions have the fields: {fields}" if fields else "") + ".\n"
                "The run stopped before any reflection; these calls were not charged or logged, so the corrected "
                "rerun starts fresh.")
        others = sorted({r.metric_note or "" for r in results[1:]} - {self.fault})
        if others:
            text += "\nAlso: " + "; ".join(o[:160] for o in others[:3])
        super().__init__(text)


def metric_fault(result: RowResult) -> bool:
    """The program ran, and the metric raised or returned something that is not a score (recorded, scored
    failure_score)."""
    return result.error is None and bool(result.metric_note)


class FirstCallsGuard:
    """Holds back a session's first scored calls while every one failed for a configuration reason, or while every
    one was a metric fault (see the module docstring). `admit(item, result)` returns the items to log now; it stops
    the run (`LMSetupError`) once `limit` configuration failures are held. `evaluation_done(...)` stops it when a
    first evaluation ended with nothing else (`LMSetupError`, or `MetricFaultError`). Thread-safe."""

    def __init__(self, roles: Sequence[LMRole] = (), limit: int = 4):
        self.roles, self.limit = list(roles), max(1, limit)
        self.open = True                # still watching (every call so far failed the same one of the two ways)
        self.tripped = False
        self._held: list[tuple[Any, RowResult, str]] = []
        self._lock = threading.Lock()

    def admit(self, item: Any, result: RowResult) -> list[Any]:
        with self._lock:
            if self.tripped:
                return []                # the run is stopping: calls still finishing are not logged
            if not self.open:
                return [item]
            reason = row_reason(result) or (METRIC_FAULT if metric_fault(result) else None)
            if reason is None or (self._held and (reason == METRIC_FAULT) != (self._held[0][2] == METRIC_FAULT)):
                return self._stand_down([item])
            self._held.append((item, result, reason))
            if reason == METRIC_FAULT or len(self._held) < self.limit:
                return []                # metric faults stop the run only once a whole evaluation had nothing else
            self.tripped = True
        raise self._error()

    def evaluation_done(self, replayed: Iterable[RowResult] = ()) -> list[Any]:
        """A whole evaluation ended: while every call so far failed for a configuration reason, stop; while every
        call so far was a metric fault, stop too unless one of the evaluation's results taken from a resumed log
        (`replayed`) was not. Otherwise returns the held items to log now (the guard stands down)."""
        with self._lock:
            if not self.open or self.tripped or not self._held:
                return []
            if self._held[0][2] == METRIC_FAULT and not all(metric_fault(r) for r in replayed):
                return self._stand_down([])
            self.tripped = True
        raise self._error()

    def _stand_down(self, items: list[Any]) -> list[Any]:
        self.open = False
        released, self._held = [i for i, _, _ in self._held] + items, []
        return released

    def _error(self) -> LMSetupError | MetricFaultError:
        if self._held[0][2] == METRIC_FAULT:
            return MetricFaultError([r for _, r, _ in self._held])
        first, reason = self._held[0][1], self._held[0][2]
        model = model_named(first.error or "")
        role = " and ".join(r.role for r in self.roles if model is not None and r.model == model) or \
            "an LM your program calls"
        others = sorted({f"{row_reason(r)}: {(r.error or '')[:160]}" for _, r, _ in self._held[1:]
                         if (r.error or "")[:160] != (first.error or "")[:160]})
        return LMSetupError(role, model, reason, first.error or "", others=others[:3],
                            when=f"The first {len(self._held)} scored calls all failed this way, so the run stopped "
                                 "before spending its budget; they were not charged or logged.")


def row_reason(result: RowResult) -> str | None:
    """The configuration reason a scored call failed for (its recorded error), or None."""
    if not result.error:
        return None
    kind = result.error_kind or result.error.split(":", 1)[0]
    return configuration_reason([kind, result.error.split(":", 1)[0]], result.error)


def model_named(error: str) -> str | None:
    """The model DSPy names at the start of its LM errors ("[openai/gpt-4.1-mini] no API key ...")."""
    m = _MODEL_PREFIX.search(error[:400])
    return m.group(1) if m else None


__all__ = ["FIXES", "FirstCallsGuard", "LMRole", "LMSetupError", "MetricFaultError", "check_lms",
           "configuration_reason", "exception_reason", "given", "lm_roles", "lms_inside", "metric_fault",
           "model_named", "provider_served", "row_reason", "usable_lm"]
