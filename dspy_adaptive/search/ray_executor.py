"""`executor="ray"`: rows run on long-lived Ray actors (Ray is an optional extra: pip install -e ".[ray]").

Each actor is built once and holds what a row needs: the student (the frozen fallback), a RoutedProgram
with its own warm sandbox pool, the LM clients (the configured LM and adapter, and the fast/deep profiles)
and the metric. A batch is split across the actors in contiguous chunks; each actor receives (library,
rows) and returns one RowResult per row, with traces, plus the LM usage it spent (added to the driver's
cost ledger under the same roles). The budget, the cache, the run record and every decision stay in the
driver: results are charged there, once, after they arrive.

A failed actor (its process died, or Ray lost it) is replaced and its rows are run again on the new actor,
up to `max_retries` times; rows that still cannot run come back as failed RowResults (scored
`failure_score`, error kind `executor`). No row is lost, none is charged twice: a chunk whose actor died
returned nothing, so nothing of it was charged or logged.

With the same seed and an LM whose answers depend only on the prompt, the results equal the thread
executor's: each row is scored by the same function on the same program, and results come back in row order.

What the actors receive -- the metric, the student, the LMs, the adapter, the tools -- is checked before Ray
starts: anything that cannot be pickled is refused naming it and what to do (`refuse_unpicklable`), before
any LM call. The modules those objects are defined in, when they are the user's own rather than installed
packages (`user_modules`: a metric in `my_metric.py` next to the script, a package on a path the driver
added), are shipped to the actors: as Ray's runtime_env `py_modules` of the Ray this executor starts (a
local one, or a cluster at `address`), or -- with a Ray already started by the caller, whose runtime_env is
fixed -- pickled by value (cloudpickle's `register_pickle_by_value`) for the run.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import time
import types
from typing import Any, Callable, Iterable, Mapping, Sequence

from dspy_adaptive.data import InputError, Row
from dspy_adaptive.program.library import Library
from dspy_adaptive.program.route_memo import RouteMemo
from dspy_adaptive.program.routed import render_specialists
from dspy_adaptive.schema import RowResult
from dspy_adaptive.search.executor import OnResult


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError('executor="ray" needs Ray, an optional extra: pip install -e ".[ray]" (or pip install ray); '
                         'executor="threads" (the default) needs nothing') from None
    return ray


#: Packages whose modules the actors have installed: never shipped (this one included: RowActor lives here).
_INSTALLED_ROOTS = ("dspy_adaptive", "dspy", "ray", "gepa", "litellm", "pydantic")


def _installed_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")} | {sys.prefix, sys.base_prefix}
    return tuple(os.path.realpath(d) + os.sep for d in dirs if d)


def _module_of(obj: Any) -> str | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, (type, types.FunctionType, types.MethodType)):
        return getattr(obj, "__module__", None)
    return type(obj).__module__


def user_modules(objects: Iterable[Any]) -> list[types.ModuleType]:
    """The top-level modules or packages defining `objects` (or their classes) that are the user's own: not
    `__main__` (pickled by value anyway), not built in, not installed (under the interpreter's prefix or
    site-packages), not this package or the libraries the actors run."""
    installed, out = _installed_dirs(), {}
    for obj in objects:
        name = _module_of(obj)
        if not name or name == "__main__" or name.split(".")[0] in _INSTALLED_ROOTS:
            continue
        root = sys.modules.get(name.split(".")[0])
        path = getattr(root, "__file__", None)
        if root is None or not path or os.path.realpath(path).startswith(installed):
            continue
        out[root.__name__] = root
    return list(out.values())


def _describe(obj: Any) -> str:
    """A short name for an object in an error: an LM by its model, a function by its qualified name."""
    if getattr(obj, "model", None) is not None:
        return f"{type(obj).__name__}(model={obj.model!r})"
    name = getattr(obj, "__qualname__", None)
    if name is not None:
        return f"{getattr(obj, '__module__', '?')}.{name}"
    shown = repr(obj)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def refuse_unpicklable(named: Mapping[str, Any]) -> None:
    """InputError naming the first of `named` ({what: object}) that cannot be pickled for the actors."""
    ray = require_ray()
    for what, obj in named.items():
        if obj is None:
            continue
        try:
            ray.cloudpickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 - whatever the pickler raises, the message says what and why
            shown = _describe(obj)
            raise InputError(
                f'executor="ray" sends the {what} ({shown}) to every Ray actor, but it cannot be pickled '
                f"({type(e).__name__}: {str(e)[:200]}). Make it picklable -- keep no open client, lock, thread, "
                "file or generator in its attributes (create them on first use, or give its class "
                "__getstate__/__setstate__ that drop and recreate them) -- or run with executor=\"threads\"."
            ) from None


class RowActor:
    """One Ray actor: a RoutedProgram with its own sandbox pool and the LM clients (built once)."""

    def __init__(self, build: Callable[[], tuple[Any, Callable[[Any, Row], RowResult]]], settings: dict[str, Any]):
        import dspy

        from dspy_adaptive.lm.usage import UsageMeter
        dspy.configure(**{k: v for k, v in settings.items() if v is not None})
        self.base, self.score_row = build()
        self.meter_cls = UsageMeter
        self.base.sandbox.prestart()      # the warm zygote starts with the actor, not on its first row

    def run(self, library: dict[str, Any], rows: list[Row],
            memo: dict[tuple, Any] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any], dict[tuple, Any]]:
        """(row results, LM usage, router decisions made here that `memo` did not have)."""
        program = self.base.with_library(Library.from_dict(library))
        shared = self.base.route_memo
        if shared is not None and memo:
            shared.update(memo)
        before = set(shared.snapshot()) if shared is not None else set()
        meter = self.meter_cls()
        with meter.active():
            results = [self.score_row(program, r).to_dict() for r in rows]
        new = {k: v for k, v in shared.snapshot().items() if k not in before} if shared is not None else {}
        return results, meter.snapshot(), new

    def pid(self) -> int:
        import os
        return os.getpid()


class RayExecutor:
    """Rows on `num_actors` long-lived Ray actors (see the module docstring). Its constructor returns once every
    actor is built (`startup_s`; `RayExecutor.last_startup_s` keeps the latest, for benchmarks).

    Args:
        build: a picklable function returning (base RoutedProgram, score_row) inside an actor.
        num_actors: how many actors (each with its own sandbox pool).
        address: a Ray cluster address (None: the running Ray, else a local one with `num_cpus`).
        settings: dspy.settings to configure in each actor (the LM and adapter the program relies on).
        failure_score: the score of a row that could not be run.
        max_retries: how many times a dead actor's rows are run again on a replacement.
        on_usage: called with each chunk's LM usage snapshot (per role).
        ship: the user's modules the actors need (`user_modules`), shipped as the module docstring says.
    """

    last_startup_s: float = 0.0

    def __init__(self, build: Callable[[], Any], *, num_actors: int = 2, address: str | None = None,
                 settings: dict[str, Any] | None = None, failure_score: float = 0.0, max_retries: int = 2,
                 on_usage: Callable[[dict[str, Any]], None] | None = None, num_cpus: int | None = None,
                 route_memo: Callable[[], RouteMemo | None] | None = None, ship: Sequence[types.ModuleType] = ()):
        self.ray = require_ray()
        self.by_value: tuple[types.ModuleType, ...] = ()
        if not self.ray.is_initialized():
            self.ray.init(address=address, num_cpus=num_cpus if address is None else None,
                          include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                          runtime_env={"py_modules": list(ship)} if ship else None)
        else:                                   # its runtime_env is the caller's: ship by value instead
            known = self.ray.cloudpickle.list_registry_pickle_by_value()
            self.by_value = tuple(m for m in ship if m.__name__ not in known)
            for module in self.by_value:
                self.ray.cloudpickle.register_pickle_by_value(module)
        self._actor_cls = self.ray.remote(num_cpus=0)(RowActor)
        self._build, self._settings = build, dict(settings or {})
        self.failure_score, self.max_retries, self.on_usage = failure_score, max_retries, on_usage
        self.route_memo = route_memo     # the driver's router-decision memo, shared with the actors per batch
        t0 = time.perf_counter()
        self.actors = [self._new_actor() for _ in range(max(1, num_actors))]
        self.ray.get([a.pid.remote() for a in self.actors])   # built and ready: a broken actor fails here, first
        self.startup_s = time.perf_counter() - t0
        RayExecutor.last_startup_s = self.startup_s
        self.replaced = 0

    def _new_actor(self) -> Any:
        return self._actor_cls.remote(self._build, self._settings)

    def run(self, library: Library, rows: Sequence[Row], on_result: OnResult | None = None) -> list[RowResult]:
        rows = list(rows)
        if not rows:
            return []
        n = min(len(self.actors), len(rows))
        size = -(-len(rows) // n)
        chunks = [(i, rows[i * size:(i + 1) * size]) for i in range(n) if rows[i * size:(i + 1) * size]]
        lib = library.to_dict()
        memo = self.route_memo() if self.route_memo is not None else None
        known = self._memo_for(library, memo)
        pending = {self.actors[i].run.remote(lib, chunk, known): (i, chunk, 0) for i, chunk in chunks}
        done: dict[int, list[RowResult]] = {}
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            i, chunk, attempt = pending.pop(ref)
            try:
                outcome = self.ray.get(ref)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorDiedError,
                    self.ray.exceptions.WorkerCrashedError) as e:
                self.actors[i] = self._new_actor()          # replace the dead actor; its rows were never charged
                self.replaced += 1
                if attempt < self.max_retries:
                    pending[self.actors[i].run.remote(lib, chunk, known)] = (i, chunk, attempt + 1)
                    continue
                results, usage, decisions = [self._failed(r, e).to_dict() for r in chunk], {}, {}
            else:
                results, usage, decisions = outcome
            if memo is not None and decisions:
                memo.update(decisions)
            parsed = [RowResult.from_dict(d) for d in results]
            if usage and self.on_usage is not None:
                self.on_usage(usage)
            for res in parsed:
                if on_result is not None:
                    on_result(res)
            done[i] = parsed
        return [res for i in sorted(done) for res in done[i]]

    @staticmethod
    def _memo_for(library: Library, memo: RouteMemo | None) -> dict:
        """The memo's decisions for this library's router and descriptions (what its rows can hit)."""
        if not memo:
            return {}
        return memo.for_router(library.router, render_specialists(library))

    def _failed(self, row: Row, error: Exception) -> RowResult:
        reason = f"the executor could not run this row: {type(error).__name__}"
        return RowResult(row_id=row.id, score=self.failure_score, feedback=f"The program could not be run, so it "
                         f"scored {self.failure_score}: {reason}", output=None, selected=None, executed=None,
                         fallback_reason=None, error=reason, steps=(), error_kind="executor")

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []
        for module in self.by_value:
            self.ray.cloudpickle.unregister_pickle_by_value(module)
        self.by_value = ()


__all__ = ["RayExecutor", "RowActor", "refuse_unpicklable", "require_ray", "user_modules"]
