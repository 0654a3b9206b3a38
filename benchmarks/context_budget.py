"""What reflection reads of the four families' samples, before and after the context budget (issue 27).

    python -m benchmarks.context_budget [--data ../shared/data] [--windows 16384,32768,131072,1050000]

Builds family-balanced feedback minibatches of 24 records (6 per family, cycling the smaller families) from
every LiveBench-IF sample and the other families' samples, with realistic records: the fallback's step,
an output (LiveBench-IF: the article; PUPA: the reference response; AIME and HotpotQA: a short wrong answer)
and the families' real feedback (the project's metrics; PUPA's judge is replaced by a fixed verdict of the
metric's shape). Prints, per family, characters of requests and feedback left out and LiveBench-IF
constraint sentences dropped, with the old fixed caps (requests cut to their first 1,500 characters,
feedback to 3,000) and with the budget at each window; and the largest reflection prompt (the activation
call, traces included, formatted by DSPy's ChatAdapter) in tokens against the window, counted with
litellm's tokenizer for gpt-4.1 (o200k) beside the estimate the budget uses.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import dspy

from dspy_adaptive.data import Row
from dspy_adaptive.program.library import Library
from dspy_adaptive.reflection import budget
from dspy_adaptive.reflection import signatures as sig
from dspy_adaptive.reflection.propose import Reflector
from dspy_adaptive.reflection.traces import fitted_values, record_values, render_record, render_slots, render_traces
from dspy_adaptive.schema import RowResult, clip

FAMILY_ORDER = ("hotpotqa", "aime", "pupa", "livebench_if")
PER_FAMILY = 6
OLD_CAPS = {"input": 1500, "step": 700, "output": 1500, "feedback": 3000, "error": 1000, "why": 1000}
WINDOWS = (16_384, 32_768, 131_072, 1_050_000)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def constraint_sentences(request: str) -> list[str]:
    """A LiveBench-IF request's constraint sentences: the text after its last '-------' line, split."""
    tail = request.rsplit("-------", 1)[-1]
    return [s.strip() for s in _SENTENCE.split(tail) if len(s.strip()) > 3]


def _examples(data_dir: Path) -> dict[str, list[dspy.Example]]:
    from benchmarks import data as d
    read = {"hotpotqa": d._hotpot_example, "aime": d._aime_example, "pupa": d._pupa_example,
            "livebench_if": d._livebench_example}
    return {fam: [read[fam](r) for r in d._read_jsonl(data_dir / d.LOCAL_FILES[fam])] for fam in FAMILY_ORDER}


def _record(ex: dspy.Example, metric: Any) -> RowResult:
    """A realistic feedback record for one example: P0's step, an output and the family's real feedback."""
    from benchmarks.data import livebench_article
    fam = ex.family
    if fam == "livebench_if":
        answer = livebench_article({"turns": [ex.request]}) or ex.request
    elif fam == "pupa":
        answer = ex.target_response
    elif fam == "aime":
        answer = "After simplifying, the answer is 17."
    else:
        answer = "I could not find this."
    if fam == "pupa":
        feedback = ("The response was judged worse than the reference answer. 1 of "
                    f"{max(1, len(ex.pii_units))} private items leaked to the external model. Utility = 0.25.")
        score = 0.25
    else:
        out = metric(ex, dspy.Prediction(response=answer))
        feedback, score = str(out.feedback), float(out.score)
    step = {"predictor": "fallback.predict", "inputs": {"request": ex.request}, "outputs": {"response": answer}}
    return RowResult(str(ex.id), score, feedback, {"response": answer}, 0, 0, None, None, (step,))


@dataclass
class Tally:
    requests: int = 0
    requests_cut: int = 0
    request_chars: int = 0
    request_chars_left_out: int = 0
    feedback_chars: int = 0
    feedback_chars_left_out: int = 0
    constraint_sentences: int = 0
    constraint_sentences_dropped: int = 0
    examples: list[str] = field(default_factory=list)


def _left_out(shown: str, original: str) -> int:
    """Characters of `original` not shown: from the budget's markers, or from a prefix clip's note."""
    marked = sum(int(n) for n in re.findall(r"\[\.\.\. (\d+) characters left out \.\.\.\]", shown))
    clipped = re.search(r"\.\.\. \[(\d+) more chars\]$", shown)
    return marked + (int(clipped.group(1)) if clipped else 0)


class _Watch:
    """A `show` hook that records each value as shown (old caps, or the budget's replayed values)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seen = inner, []

    def __call__(self, kind: str, text: str) -> str:
        shown = self.inner(kind, text)
        self.seen.append((kind, text, shown))
        return shown


def _tally(seen: Sequence[tuple[str, str, str]], families: Sequence[str], tallies: dict[str, Tally]) -> None:
    fam_iter = iter(families)
    fam = None
    for kind, original, shown in seen:
        if kind == "input":
            fam = next(fam_iter)
            t = tallies[fam]
            t.requests += 1
            t.request_chars += len(original)
            cut = _left_out(shown, original)
            t.request_chars_left_out += cut
            t.requests_cut += cut > 0
            if fam == "livebench_if":
                sents = constraint_sentences(original)
                dropped = [s for s in sents if s not in shown]
                t.constraint_sentences += len(sents)
                t.constraint_sentences_dropped += len(dropped)
        elif kind == "feedback" and fam is not None:
            tallies[fam].feedback_chars += len(original)
            tallies[fam].feedback_chars_left_out += _left_out(shown, original)


def _old_traces(rows: Sequence[Row], results: Sequence[RowResult], watch: _Watch) -> str:
    return "\n\n".join(render_record(i + 1, r, res, "", None, [0], watch)
                       for i, (r, res) in enumerate(zip(rows, results)))


def _new_shown(rows: Sequence[Row], results: Sequence[RowResult], tokens: int) -> tuple[str, list]:
    """The budgeted traces and the (kind, original, shown) values, in order."""
    values = record_values(rows, results)
    texts = fitted_values(rows, results, tokens) or [t for _, t in values]
    return render_traces(rows, results, None, tokens), [(k, t, s) for (k, t), s in zip(values, texts)]


def _prompt_tokens(reflector: Reflector, parent: Library, traces: str) -> tuple[int, int]:
    """(litellm tokens for gpt-4.1, the budget's estimate) of the activation call's formatted prompt."""
    import litellm
    inputs = {"traces": traces, "router": parent.router, "specialists": render_slots(parent), "target_slot": "1",
              "program_contract": reflector.contract}
    messages = dspy.ChatAdapter().format(sig.ActivateSlot, demos=[], inputs=inputs)
    text = "\n".join(m["content"] for m in messages)
    return litellm.token_counter(model="gpt-4.1", messages=messages), budget.estimate_tokens(text)


class _WindowLM:
    """Stands in for the reflection LM: a model name litellm does not know and a max_tokens."""

    def __init__(self, max_tokens: int) -> None:
        self.model, self.kwargs = "hosted_vllm/unknown-model", {"max_tokens": max_tokens}


def minibatches(examples: dict[str, list[dspy.Example]]) -> list[list[dspy.Example]]:
    """Every LiveBench-IF sample once, 6 per batch, each batch with 6 of every other family (cycled)."""
    cycles = {f: itertools.cycle(examples[f]) for f in FAMILY_ORDER}
    lb = examples["livebench_if"]
    batches = []
    for i in range(0, len(lb), PER_FAMILY):
        batch = []
        for fam in FAMILY_ORDER:
            batch += lb[i:i + PER_FAMILY] if fam == "livebench_if" else [next(cycles[fam]) for _ in range(PER_FAMILY)]
        batches.append(batch)
    return batches


def measure(data_dir: Path, windows: Sequence[int] = WINDOWS) -> dict[str, Any]:
    from dspy_adaptive.tasks.ifeval import evaluate_instructions
    from dspy_adaptive.tasks.metrics import MixtureMetric
    metric = MixtureMetric(ifeval_checker=evaluate_instructions)
    examples = _examples(data_dir)
    batches = minibatches(examples)
    parent = Library.empty(5)
    records = {}
    out: dict[str, Any] = {"batches": len(batches), "per_batch": 4 * PER_FAMILY, "settings": {}}
    old = {f: Tally() for f in FAMILY_ORDER}
    new = {w: {f: Tally() for f in FAMILY_ORDER} for w in windows}
    prompt = {w: {"max_tokens": 0, "max_estimate": 0, "trace_budget": 0, "over_window": 0} for w in windows}
    old_prompt = {"max_tokens": 0}
    for batch in batches:
        rows = [Row(str(ex.id), ex) for ex in batch]
        results = []
        for ex in batch:
            if ex.id not in records:
                records[ex.id] = _record(ex, metric)
            results.append(records[ex.id])
        fams = [ex.family for ex in batch]
        w_old = _Watch(lambda k, t: clip(t, OLD_CAPS[k]))
        old_text = _old_traces(rows, results, w_old)
        _tally(w_old.seen, fams, old)
        for w in windows:
            max_tokens = 4096 if w <= 32_768 else 32_000
            reflector = Reflector(_WindowLM(max_tokens), input_names=("request",), output_names=("response",),
                                  tools=("search",), context_tokens=w)
            tokens = reflector.trace_tokens(parent)
            text, seen = _new_shown(rows, results, tokens)
            _tally(seen, fams, new[w])
            real, est = _prompt_tokens(reflector, parent, text)
            p = prompt[w]
            p["trace_budget"] = tokens
            p["max_tokens"], p["max_estimate"] = max(p["max_tokens"], real), max(p["max_estimate"], est)
            p["over_window"] += real + budget.output_reserve(reflector.lm, w) > w
            p["answer_reserve"] = budget.output_reserve(reflector.lm, w)
        real_old, _ = _prompt_tokens(Reflector(_WindowLM(4096), input_names=("request",), output_names=("response",),
                                               tools=("search",)), parent, old_text)
        old_prompt["max_tokens"] = max(old_prompt["max_tokens"], real_old)
    out["old"] = {f: vars(t) for f, t in old.items()}
    out["old_prompt"] = old_prompt
    out["new"] = {str(w): {f: vars(t) for f, t in new[w].items()} for w in windows}
    out["prompt"] = {str(w): prompt[w] for w in windows}
    return out


def render(res: dict[str, Any]) -> str:
    lines = [f"{res['batches']} minibatches of {res['per_batch']} records (6 per family; every LiveBench-IF "
             "sample once, the other families cycled)", ""]
    head = ("| setting | family | requests cut | request chars left out | feedback chars left out | "
            "LB-IF constraint sentences dropped |")
    lines += [head, "|---|---|---:|---:|---:|---:|"]

    def row(name: str, fam: str, t: dict) -> str:
        cons = (f"{t['constraint_sentences_dropped']} / {t['constraint_sentences']}"
                if fam == "livebench_if" else "")
        return (f"| {name} | {fam} | {t['requests_cut']} / {t['requests']} | "
                f"{t['request_chars_left_out']:,} / {t['request_chars']:,} | "
                f"{t['feedback_chars_left_out']:,} / {t['feedback_chars']:,} | {cons} |")

    for fam in FAMILY_ORDER:
        lines.append(row("before (1,500 / 3,000 caps)", fam, res["old"][fam]))
    for w, fams in res["new"].items():
        for fam in FAMILY_ORDER:
            lines.append(row(f"budget, window {int(w):,}", fam, fams[fam]))
    lines += ["", "| window | answer reserve | trace budget (est. tokens) | largest prompt (gpt-4.1 tokens) | "
              "its estimate | prompts over window |", "|---:|---:|---:|---:|---:|---:|"]
    for w, p in res["prompt"].items():
        lines.append(f"| {int(w):,} | {p['answer_reserve']:,} | {p['trace_budget']:,} | {p['max_tokens']:,} | "
                     f"{p['max_estimate']:,} | {p['over_window']} |")
    lines.append(f"\nbefore: the largest prompt was {res['old_prompt']['max_tokens']:,} gpt-4.1 tokens")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from benchmarks.data import default_data_dir
    p = argparse.ArgumentParser(prog="python -m benchmarks.context_budget", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None, help="directory of the samples (default: ../shared/data)")
    p.add_argument("--windows", default=",".join(map(str, WINDOWS)), help="context windows in tokens")
    p.add_argument("--json", help="also write the figures to this JSON file")
    a = p.parse_args(argv)
    res = measure(Path(a.data) if a.data else default_data_dir(), [int(w) for w in a.windows.split(",")])
    print(render(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
