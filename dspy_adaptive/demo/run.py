"""The offline demo end to end: `run_demo(DemoConfig(...))`, what `adaptive-gepa demo` runs.

Adaptive-GEPA on the built-in mini mixture (four families written for this project) with the reusable
pieces of `dspy_adaptive.tasks` (seed program, mixture metric, family-balanced sampler, BM25 search
over the demo corpus) and an in-process GGUF model as actor, router, judge and reflection LM, a small
budget, progress bars, and resume on rerun. It writes to `out`:

    report.md                 seed vs optimized test scores per family, routing, the final library,
                              proposals per action, LM usage per role, budget
    learning_curve.png, routing_heatmap.png, lineage.png, family_scores.png
    routed.json               the saved RoutedProgram (DSPy JSON state)
    library/                  the exported library (router.txt, slot_k/...)
    search/                   the optimizer's log_dir (checkpoint, run.json) — rerun to resume
    test_results.json         every test-row score and route, per program
    run.lock                  held while a demo runs in `out`: a second one is refused (see run_demo)
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import dspy

from dspy_adaptive.escaping import md_code, md_text
from dspy_adaptive.schema import slot_label

FAMILY_NAMES = {"hotpotqa": "multi-hop QA", "aime": "arithmetic", "pupa": "private rewrite",
                "livebench_if": "constrained writing"}


@dataclass(frozen=True)
class DemoConfig:
    """The demo's settings (the `adaptive-gepa demo` options).

    Args:
        out: output directory.
        actor_lm: actor/router LM: "local", "local:/path.gguf", a litellm model string, or "scripted"
            (deterministic scripted LMs for every role, for tests).
        reflection_lm: reflection LM (same forms).
        judge_lm: PUPA judge LM (default: the actor LM).
        budget: max_metric_calls.
        minibatch: reflection minibatch size.
        max_specialists: K, the number of specialist slots.
        threads: evaluation threads.
        max_tokens: actor max tokens per call.
        reflection_max_tokens: reflection max tokens per call.
        judge_max_tokens: PUPA judge max tokens per call.
        seed: the search's random seed.
        max_idle: stop after this many iterations in a row that spend no scored call.
        proposal_format: "code", "structured" or "auto" (see AdaptiveGEPA); None: "structured" when the
            reflection LM is the local model (a 135M model cannot write a valid dspy.Module, but it fills a
            grammar-constrained specification), else "auto".
        max_repair_attempts: repair calls after a reflection answer is rejected before the gate.
        distill_router: distil the optimized program's LM router at the end of compile (AdaptiveGEPA's
            distill_router option) and serve the test requests with it; the report shows what was built.
    """

    out: str = "runs/demo"
    actor_lm: str = "local"
    reflection_lm: str = "local"
    judge_lm: str | None = None
    budget: int = 160
    minibatch: int = 4
    max_specialists: int = 4
    threads: int = 2
    max_tokens: int = 96
    reflection_max_tokens: int = 700
    judge_max_tokens: int = 384
    seed: int = 0
    max_idle: int = 6
    proposal_format: str | None = None
    max_repair_attempts: int = 1
    distill_router: bool = False

    def role_names(self) -> tuple[str, str, str]:
        """(actor, reflection, judge) as the run used them: every role is "scripted" in the scripted tour."""
        if self.actor_lm == "scripted":
            return "scripted", "scripted", "scripted"
        return self.actor_lm, self.reflection_lm, self.judge_lm or self.actor_lm

    def resolved_format(self) -> str:
        if self.proposal_format is not None:
            return self.proposal_format
        if self.actor_lm == "scripted":
            return "code"               # the scripted world writes specialist source
        return "structured" if self.reflection_lm.startswith("local") else "auto"


def demo_examples() -> tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]:
    """The mixture's (train, val, test), shaped for `tasks.metrics` (LiveBench-IF kwargs as `instruction_kwargs`)."""
    from dspy_adaptive.demo.mixture import load_demo_mixture

    def adapt(ex: dspy.Example) -> dspy.Example:
        if ex.get("family") == "livebench_if" and "instruction_kwargs" not in ex:
            ex = ex.copy(instruction_kwargs=ex.get("kwargs") or [])
        return ex.with_inputs("request")

    return tuple([adapt(e) for e in split] for split in load_demo_mixture())  # type: ignore[return-value]


def evaluate_on(program: Any, examples: Sequence[dspy.Example], metric: Any, desc: str,
                num_threads: int = 1) -> list[dict[str, Any]]:
    """Score `program` on `examples` through the package's one split scorer (`record.experiment.score_split`):
    one row per example with its family, score, errors and executed slot."""
    from dspy_adaptive.record.experiment import score_split
    print(f"[demo] {desc}: {len(examples)} requests")
    return [r.to_dict() for r in score_split(program, examples, metric, num_threads=num_threads, progress=True)]


def family_means(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    fams: dict[str, list[float]] = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r["score"])
    return {f: sum(v) / len(v) for f, v in sorted(fams.items())}


def check_lm_spec(option: str, spec: str | None) -> None:
    """An LM option names a model we can load: a local GGUF path that exists, the bundled model (its package
    installed), or a litellm model string."""
    if spec is None or spec == "scripted":
        if spec == "scripted" and option != "--actor-lm":
            raise DemoError(f"{option} scripted: 'scripted' is set with --actor-lm and scripts every role")
        return
    if spec == "local" or spec.startswith("local:"):
        path = spec.partition(":")[2]
        if path and not Path(path).is_file():
            raise DemoError(f"{option} {spec}: no GGUF file at {path}")
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise DemoError(f"{option} {spec} needs llama-cpp-python: pip install -e \".[local]\" (it compiles "
                            "llama.cpp the first time, about 7-8 minutes), or give a litellm model string") from None
        return
    if not spec.strip() or any(c.isspace() for c in spec):
        raise DemoError(f"{option} {spec!r} is not a model name: use 'local', 'local:/path.gguf', a litellm model "
                        "string such as openai/gpt-4.1-mini, or 'scripted'")


def _lm(spec: str, **kwargs: Any) -> dspy.LM:
    from dspy_adaptive.lm import make_lm
    return make_lm(spec, **kwargs)


class DemoError(ValueError):
    """A demo option is unusable: the message names the option as the user typed it."""


STATE_FILE = "demo.json"     # wall time across sessions, so a resumed run reports the whole run's time


def check_out(out: Path) -> None:
    """`--out` must be a directory we can write (created when missing)."""
    if out.exists() and not out.is_dir():
        raise DemoError(f"--out {out} is a file; give a directory (it is created if it does not exist)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoError(f"--out {out} cannot be created ({e.strerror or e}); give a directory you can write to") \
            from None


class WallClock:
    """The demo's wall time, summed over every session of the same --out (resumes included)."""

    def __init__(self, out: Path):
        self.path = out / STATE_FILE
        self._stop = threading.Event()
        try:
            self.found: str | None = self.path.read_text(encoding="utf-8")
            saved = json.loads(self.found)
        except (OSError, ValueError):
            self.found, saved = None, {}
        self.before = float(saved.get("wall_seconds", 0.0)) if isinstance(saved, dict) else 0.0
        self.sessions = int(saved.get("sessions", 0)) + 1 if isinstance(saved, dict) else 1
        self.started = time.perf_counter()

    @property
    def total(self) -> float:
        return self.before + time.perf_counter() - self.started

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"wall_seconds": round(self.total, 1), "sessions": self.sessions}), encoding="utf-8")
        os.replace(tmp, self.path)

    def keep_saving(self, every: float = 30.0) -> None:
        """Save every `every` seconds from now on (a daemon thread), so a session killed outright (SIGKILL, a power
        cut) still leaves its time to within that. The first save comes only after `every` seconds: a session
        refused in its first seconds is never written."""
        def beat() -> None:
            while not self._stop.wait(every):
                try:
                    self.save()
                except OSError:
                    return
        threading.Thread(target=beat, name="demo-wall-clock", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def forget(self) -> None:
        """This session was refused: leave demo.json as it was found (a slow refusal may have saved already)."""
        self.stop()
        if self.found is None:
            self.path.unlink(missing_ok=True)
        else:
            self.path.write_text(self.found, encoding="utf-8")


def run_demo(config: DemoConfig) -> Path:
    """Run (or resume) the demo; returns the output directory. Ctrl-C (or SIGTERM) keeps everything scored so
    far: rerun the same command to resume. A session refused before it ran anything (options, another run in
    --out, an LM that cannot be used) is not counted in demo.json's sessions or wall time.

    --out is this session's from start to end (the run lock of `search.checkpoint.DirLock`, the one the search
    takes on its own log_dir, --out/search): a second demo started into the same --out meanwhile is refused at
    once (`LogDirInUseError`), before it reads or writes anything there or calls any LM. The demo's own work
    outside the search (the test evaluation, demo.json, the report and export) is covered too."""
    from dspy_adaptive.search.checkpoint import DirLock, LogDirInUseError

    out = Path(config.out)
    check_out(out)
    try:
        lock = DirLock.acquire(out, what="demo run", option="--out")
    except OSError as e:
        raise DemoError(f"--out {out} cannot be written ({e.strerror or e}); give a directory you can write to") \
            from None
    with lock:
        clock = WallClock(out)
        clock.keep_saving()
        try:
            result = _run_demo(config, out, clock)
        except (DemoError, LogDirInUseError):
            clock.forget()
            raise                      # refused before anything ran: not a session
        except BaseException:
            clock.stop()
            clock.save()               # interrupted, terminated or failed mid-run: its time counts
            raise
        clock.stop()
        clock.save()
    return result


def _run_demo(config: DemoConfig, out: Path, clock: WallClock) -> Path:
    from dspy_adaptive import AdaptiveGEPA, RoutedProgram, load_run
    from dspy_adaptive.demo.mixture import demo_corpus_path
    from dspy_adaptive.lm.plain_adapter import PlainTextAdapter
    from dspy_adaptive.lm.preflight import LMSetupError
    from dspy_adaptive.optimizers.adaptive_gepa import ResumeMismatchError
    from dspy_adaptive.record.analysis import write_labels
    from dspy_adaptive.record.plots import plot_family_scores, plot_learning_curve, plot_lineage, plot_routing_heatmap
    from dspy_adaptive.record.writer import write_record
    from dspy_adaptive.tasks.metrics import MixtureMetric
    from dspy_adaptive.tasks.programs import SeedProgram
    from dspy_adaptive.tasks.retrieval import make_search_tool
    from dspy_adaptive.tasks.sampler import FamilyBalancedSampler

    c = config
    train, val, test = demo_examples()
    if c.actor_lm == "scripted":  # tests: deterministic scripted LMs for every role
        from dspy_adaptive.testing import ScriptedWorld, scripted_lm
        world = ScriptedWorld(train + val + test)
        fast = deep = scripted_lm(world.actor, model="scripted/actor")
        reflection, judge = scripted_lm(world.reflection), scripted_lm(world.judge)
    else:
        for option, spec in (("--actor-lm", c.actor_lm), ("--reflection-lm", c.reflection_lm),
                             ("--judge-lm", c.judge_lm)):
            check_lm_spec(option, spec)
        fast = _lm(c.actor_lm, temperature=0.3, max_tokens=c.max_tokens)
        deep = _lm(c.actor_lm, temperature=0.6, max_tokens=c.max_tokens)
        reflection = _lm(c.reflection_lm, temperature=1.0, max_tokens=c.reflection_max_tokens)
        judge = _lm(c.judge_lm or c.actor_lm, temperature=0.0, max_tokens=c.judge_max_tokens)
    metric = MixtureMetric(judge_lm=judge)
    search = make_search_tool(backend="bm25", corpus_path=demo_corpus_path())
    seed = SeedProgram()
    # tiny local models answer free text best when asked in plain words, and everything else as JSON decoded under
    # a grammar; DSPy's templates make them copy placeholders (`lm.plain_adapter`)
    dspy.configure(lm=deep, adapter=PlainTextAdapter() if c.actor_lm.startswith("local") else None)

    actor_name, reflection_name, _ = c.role_names()
    print(f"[demo] {len(train)} feedback / {len(val)} validation / {len(test)} test requests; "
          f"actor {actor_name}, reflection {reflection_name}; budget {c.budget} scored calls")
    optimizer = AdaptiveGEPA(
        metric, reflection_lm=reflection, max_metric_calls=c.budget, reflection_minibatch_size=c.minibatch,
        batch_sampler=FamilyBalancedSampler(), max_specialists=c.max_specialists, num_threads=c.threads,
        fast_lm=fast, deep_lm=deep, tools=[search], log_dir=str(out / "search"), track_stats=True, seed=c.seed,
        max_idle_iterations=c.max_idle, proposal_format=c.resolved_format(),
        max_repair_attempts=c.max_repair_attempts, distill_router=c.distill_router)
    try:
        routed = optimizer.compile(seed, trainset=train, valset=val)
    except ResumeMismatchError as e:
        raise DemoError(refusal(out, e)) from None
    except LMSetupError as e:
        raise DemoError(f"{e}\nThe demo stopped before spending its budget: nothing was scored or recorded in "
                        f"{out}.") from None
    write_labels({e.id: e.family for e in val}, out / "search")
    result = load_run(out / "search")

    cached = out / "test_results.json"
    tests = json.loads(cached.read_text()) if cached.exists() else {}
    key = result.candidates[result.best_idx].content_hash + ("+distilled" if routed.distilled_router else "")
    if "seed" not in tests:
        base = RoutedProgram(seed, fast_lm=fast, deep_lm=deep, tools=[search], max_specialists=c.max_specialists)
        tests["seed"] = evaluate_on(base, test, metric, "test: seed", c.threads)
        cached.write_text(json.dumps(tests, indent=1))
    if tests.get("optimized_hash") != key:
        if result.best_idx == 0:      # the search kept the seed: its test scores are the seed's, not re-run
            tests["optimized"] = tests["seed"]
        else:
            tests["optimized"] = evaluate_on(routed, test, metric, "test: optimized", c.threads)
        tests["optimized_hash"] = key
        cached.write_text(json.dumps(tests, indent=1))

    routed.save(str(out / "routed.json"))
    routed.export(out / "library")
    test_labels = {r["id"]: friendly(r["family"]) for r in tests["optimized"]}
    gain = paired_gain(tests["seed"], tests["optimized"])
    actor, reflection, judge = c.role_names()      # (the LMs as the run used them: all "scripted" in the tour)
    config = {**dataclasses.asdict(c), "actor_lm": actor, "reflection_lm": reflection, "judge_lm": judge}
    data = {"config": config, "wall_seconds": round(clock.total, 1), "sessions": clock.sessions,
            "best_candidate": result.best_idx, "test_family_means": {k: family_means(tests[k])
                                                                     for k in ("seed", "optimized")},
            "test_comparison": gain.to_dict() if gain is not None else None,
            "test_comparison_by_family": {f: g.to_dict() for f, g in family_gains(tests).items()}}
    write_record(out, data=data, data_name="results.json",
                 report=render_report(result, tests, c, clock.total, clock.sessions, gain), plots={
                     "learning_curve.png": lambda path: plot_learning_curve(result, path),
                     "lineage.png": lambda path: plot_lineage(result, path),
                     "family_scores.png": lambda path: plot_family_scores(result, {e.id: friendly(e.family)
                                                                                   for e in val}, path),
                     "routing_heatmap.png": lambda path: plot_routing_heatmap(
                         _with_test_routes(result, tests["optimized"]), test_labels, path,
                         candidate=result.best_idx, split="test")})
    routed.close()
    print(f"[demo] done in {duration(clock.total)}"
          + (f" over {clock.sessions} sessions" if clock.sessions > 1 else "") + f"; report: {out / 'report.md'}")
    return out


def refusal(out: Path, error: Any) -> str:
    """Why a rerun into `out` was refused, in the demo's words, with what differs (the ResumeMismatchError's
    list, or its own text when the files are of another release)."""
    diffs = getattr(error, "differences", ())
    what = ("What differs:\n  " + "\n  ".join(diffs[:12]) + ("\n  ..." if len(diffs) > 12 else "")) if diffs \
        else str(error)
    return (f"--out {out} holds a demo run made with other settings; refusing to mix the two runs.\n{what}\n"
            f"Rerun with that run's options to resume it; to start fresh use another --out, or delete {out}.")


def duration(seconds: float) -> str:
    """A wall time as people read it: "3.2 s", "4.5 min", "1 h 05 min"."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def friendly(family: str) -> str:
    """A family's name as people read it ("multi-hop QA", not "hotpotqa")."""
    return FAMILY_NAMES.get(family, family)


def _with_test_routes(result: Any, rows: Sequence[dict[str, Any]]) -> Any:
    """A copy of the run result whose best candidate's routes are the TEST routes (for the heat-map)."""
    executed = list(result.executed)
    executed[result.best_idx] = {r["id"]: r["executed"] for r in rows}
    return replace(result, executed=executed)


def paired_gain(seed_rows: Sequence[dict[str, Any]], opt_rows: Sequence[dict[str, Any]]) -> Any:
    """The optimized-minus-seed test difference paired by request, by the protocol report's own statistics
    (`record.paired.paired_comparison`: BCa interval, signed-rank p, d_z, and "too small" below its minimum);
    None when no request is in both."""
    from dspy_adaptive.record.experiment import compare
    seed_ids = {r["id"] for r in seed_rows}
    if not any(r["id"] in seed_ids for r in opt_rows):
        return None
    return compare(seed_rows, opt_rows)


def family_gains(tests: dict[str, Any]) -> dict[str, Any]:
    """The optimized-minus-seed test difference of each family, paired by request (the same statistics)."""
    out = {}
    for family in sorted({r["family"] for r in tests["seed"]}, key=friendly):
        seed = [r for r in tests["seed"] if r["family"] == family]
        opt = [r for r in tests["optimized"] if r["family"] == family]
        gain = paired_gain(seed, opt)
        if gain is not None:
            out[family] = gain
    return out


def family_gain_lines(tests: dict[str, Any]) -> list[str]:
    """One row per family: means, the paired difference, its 95% BCa interval, the signed-rank p and the verdict."""
    lines = ["## Test change per family (paired by request)", "",
             "| family | requests | seed | optimized | change | 95% interval | signed-rank p | verdict |",
             "|---|---:|---:|---:|---:|---|---:|---|"]
    for family, g in family_gains(tests).items():
        interval = "-" if g.ci_low is None else f"{100 * g.ci_low:+.1f} to {100 * g.ci_high:+.1f}"
        p = "-" if g.p_value is None else f"{g.p_value:.3g}"
        lines.append(f"| {friendly(family)} | {g.n} | {100 * g.reference_mean:.1f} | {100 * g.method_mean:.1f} | "
                     f"{100 * g.diff:+.1f} | {interval} | {p} | {g.verdict} |")
    return lines + [""]


def gain_sentence(gain: Any, same_program: bool) -> str:
    if same_program:
        return ("The optimized program is the seed itself (no edit beat it on validation), so test did not move; "
                "its test scores are the seed's.")
    if gain is None:
        return "No test rows to compare."
    head = f"Test mean changed by {100 * gain.diff:+.1f} points over {gain.n} paired requests"
    if gain.too_small:
        return f"{head}: too few requests to tell whether that is above the noise (n < {gain.min_pairs})."
    verdict = ("above the noise of this split: the interval excludes 0 and the signed-rank test agrees"
               if gain.significant else
               "within the noise of this split, so this run does not show a real change")
    return (f"{head} (95% BCa bootstrap interval {100 * gain.ci_low:+.1f} to {100 * gain.ci_high:+.1f}, "
            f"signed-rank p = {gain.p_value:.3g}): {verdict}.")


def what_happened(result: Any) -> list[str]:
    """The search in plain words: proposals by outcome, repairs, and why nothing moved when nothing did."""
    from dspy_adaptive.record.run_record import proposal_outcomes

    rows = proposal_outcomes(result.proposals)
    count = {o: sum(g["count"] for g in rows if g["outcome"] == o)
             for o in ("accepted", "failed the gate", "rejected before the gate", "skipped")}
    repairs = sum(int((p.get("details") or {}).get("repairs") or 0) for p in result.proposals)
    lines = [f"{sum(count.values())} proposals: {count['accepted']} accepted into the archive, "
             f"{count['failed the gate']} reached the minibatch gate and failed it, "
             f"{count['rejected before the gate']} were rejected before the gate, {count['skipped']} skipped; "
             f"{repairs} repair calls. 'Proposals by outcome' below gives the reason for each outcome."]
    seed_val, best_val = result.val_aggregate_scores[0], result.val_aggregate_scores[result.best_idx]
    if count["accepted"] and result.best_idx == 0:
        lines.append(f"The accepted edits beat their parents on their minibatches but none beat the seed on the whole "
                     f"validation set (best of them {max(result.val_aggregate_scores[1:]):.3f} vs the seed's "
                     f"{seed_val:.3f}; a tie keeps the seed), so the optimized program is the seed. 'Accepted edits' "
                     "below shows each of them and what it changed.")
    elif result.best_idx != 0:
        lines.append(f"The best candidate (#{result.best_idx}) scores {best_val:.3f} on validation against the "
                     f"seed's {seed_val:.3f}.")
    if count["accepted"] == 0:
        if count["failed the gate"]:
            lines.append("Nothing was accepted: the proposals that ran scored no better than their parent on their "
                         "minibatch (the gate needs a strict gain), so the optimized program is the seed.")
        elif count["rejected before the gate"]:
            structured = any((p.get("details") or {}).get("format") == "structured" for p in result.proposals)
            lines.append("Nothing was accepted: no proposal got past the checks before the gate (see the reasons "
                         "below); a stronger reflection model helps" +
                         ("." if structured else ", and so does --proposal-format structured."))
    faults = result.faults or {}
    if faults.get("metric_faults"):
        notes = "; ".join(f"{n} x {note}" for note, n in faults.get("metric_fault_notes") or [])
        lines.append(f"{faults['metric_faults']} scored calls were metric faults, scored as failures ({notes}).")
    if faults.get("failed_rollouts"):
        kinds = ", ".join(f"{k} {v}" for k, v in (faults.get("failed_rollouts_by_type") or {}).items())
        top = faults.get("failed_rollout_errors") or []
        said = f"; the most common error ({top[0][1]}x): {md_text(top[0][0])}" if top else ""
        lines.append(f"{faults['failed_rollouts']} rollouts failed at run time and scored 0 ({kinds}){said}.")
    return lines


def local_model_note(config: DemoConfig) -> str:
    """What a run with the packaged local model can show (measured with `python -m benchmarks.local_models`)."""
    roles = [name for name, spec in (("router", config.actor_lm), ("reflection", config.reflection_lm))
             if spec.startswith("local")]
    text = f"A 135M-parameter local model is a weak {' and '.join(roles)} model: accepted edits are few and test " \
           "gains within the noise are expected."
    if "router" in roles:
        text += (" As the router it sends none of the demo's 64 feedback and validation requests to their family's "
                 "specialist, even with one specialist per family described by hand (14% with its answer "
                 "constrained to the valid slots, against 20% by chance: `python -m benchmarks.local_models`), so a "
                 "specialist rarely receives the requests it was made for.")
    text += (" Even the best specialist for multi-hop questions, retrieval then answer, gains 7 F1 points on this "
             "test split, within its noise. The point of this run is that every part of the system really runs, "
             "offline; real optimisation quality needs capable models (`--actor-lm`, `--reflection-lm`: any litellm "
             "model; see the README).")
    return text


def render_report(result: Any, tests: dict[str, Any], config: DemoConfig, wall: float, sessions: int = 1,
                  gain: Any = None) -> str:
    from dspy_adaptive.record.analysis import majority_mapping_agreement
    from dspy_adaptive.record.run_record import render_markdown

    seed_m, opt_m = family_means(tests["seed"]), family_means(tests["optimized"])
    fams = sorted(seed_m, key=friendly)          # the order the heat-map and the family plot use

    def mean(d: dict[str, float]) -> float:
        return sum(d.values()) / len(d)

    same = result.best_idx == 0
    gain = gain if gain is not None else paired_gain(tests["seed"], tests["optimized"])
    over = f" over {sessions} sessions (resumed {sessions - 1}x)" if sessions > 1 else ""
    actor, reflection, judge = config.role_names()
    lms = (f"Actor/router/judge: {md_code(actor)}" if judge == actor else
           f"Actor/router: {md_code(actor)}; judge: {md_code(judge)}")
    lines = ["# Adaptive-GEPA demo (offline, built-in mini mixture)", "",
             f"{lms}; reflection: {md_code(reflection)} "
             f"(proposal format {md_code(config.resolved_format())}, up to {config.max_repair_attempts} repair "
             f"call(s) per rejected answer). Wall time {duration(wall)}{over}. Budget "
             f"{result.budget['spent']} of {result.budget['max']} scored calls (stopped: {result.stop_reason}).", "",
             "## What happened", ""]
    lines += [f"- {line}" for line in what_happened(result)]
    lines += [f"- {gain_sentence(gain, same)}", ""]
    if config.actor_lm == "scripted":
        lines += ["This was the scripted tour: deterministic scripted LMs play every role, so the accept path "
                  "(propose, gate, validate, archive, route) runs in seconds; the scores say nothing about a model.",
                  ""]
    elif config.reflection_lm.startswith("local") or config.actor_lm.startswith("local"):
        lines += [local_model_note(config), ""]
    lines += [
              "## Test scores (×100)", "",
              "| program | " + " | ".join(friendly(f) for f in fams) + " | family mean |",
              "|---|" + "---:|" * (len(fams) + 1)]
    for name, m in (("seed (fallback only)", seed_m), ("optimized", opt_m)):
        lines.append(f"| {name} | " + " | ".join(f"{100 * m[f]:.1f}" for f in fams) + f" | {100 * mean(m):.1f} |")
    lines += ["", *family_gain_lines(tests)]
    table: dict[str, dict] = {}
    for r in tests["optimized"]:
        table.setdefault(r["family"], {}).setdefault(r["executed"], 0)
        table[r["family"]][r["executed"]] += 1
    per, overall = majority_mapping_agreement(table)
    slots = sorted({k for row in table.values() for k in row}, key=lambda k: (k is None, k or 0))
    lines += ["", f"## Routing on test (post-hoc majority-family agreement {overall:.1f}%)", "",
              "| family | " + " | ".join(slot_label(k) for k in slots) + " |", "|---|" + "---:|" * len(slots)]
    for f in fams:
        lines.append(f"| {friendly(f)} | "
                     + " | ".join(str(table.get(f, {}).get(k, 0)) for k in slots) + " |")
    lines += ["", "## Validation", "",
              f"Seed validation mean {result.val_aggregate_scores[0]:.3f}; best #{result.best_idx} "
              f"{result.val_aggregate_scores[result.best_idx]:.3f}; {len(result.candidates)} candidates archived.",
              "", "## Plots", "",
              "- [learning curve](learning_curve.png): validation mean of every candidate against scored calls",
              "- [routing heat-map](routing_heatmap.png): where each family's test requests went",
              "- [lineage](lineage.png): which candidate came from which",
              "- [per-family validation scores](family_scores.png): the seed next to the best candidate", "",
              "![learning curve](learning_curve.png) ![routing](routing_heatmap.png) ![lineage](lineage.png) "
              "![family scores](family_scores.png)", ""]
    body = render_markdown(result).split("\n", 1)[1]   # drop its title
    lines += ["## Search record", body]
    return "\n".join(lines) + "\n"


__all__ = ["DemoConfig", "DemoError", "FAMILY_NAMES", "demo_examples", "evaluate_on", "family_means", "friendly",
           "render_report", "run_demo", "paired_gain"]
