"""Memorisation audit (reference 001 §4.4): did the optimizer copy gold answers into the library?

    python -m benchmarks.audit RUN_DIR [--data DIR] [--min-chars 4] [--ngram 8]

Every archived library's router, descriptions and program sources are searched for the training and
validation gold outputs of the run's data (normalised: lower case, punctuation dropped, whitespace
collapsed): a whole gold answer of at least `--min-chars` characters found as a word-bounded phrase, or a
word `--ngram`-gram shared with a longer gold output (PUPA's target responses). Test gold is never
searched for: a match there could not come from what the optimizer saw. The report counts matches per
family and per candidate and lists them.

The ablation (`redact` + `ablation`): the matched content is replaced by "[redacted]" and the affected
training rows and the test rows are re-scored with and without it, through a caller-given scorer, so a run
can show whether memorised content earns reward.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

_PUNCT = str.maketrans(dict.fromkeys(string.punctuation, " "))
REDACTED = "[redacted]"


def normalise(text: Any) -> str:
    return " ".join(str(text).lower().translate(_PUNCT).split())


def gold_texts(example: Any) -> list[str]:
    """The gold outputs of one example that an optimizer could copy (answers and reference responses)."""
    out = []
    for key in ("answer", "target_response"):
        value = example.get(key) if hasattr(example, "get") else None
        if value is not None and str(value).strip():
            out.append(str(value))
    return out


def word_ngrams(text: str, n: int) -> set[str]:
    words = normalise(text).split()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


@dataclass(frozen=True)
class Match:
    candidate: int
    section: str          # router | slot<k>.description | slot<k>.program
    row_id: str
    family: str
    kind: str             # "answer" (a whole gold answer) or "ngram" (a shared n-gram of a longer gold output)
    text: str             # what matched (normalised)


def library_texts(library: Mapping[str, Any]) -> dict[str, str]:
    out = {"router": str(library.get("router", ""))}
    for k, slot in enumerate(library.get("slots") or [], start=1):
        if isinstance(slot, Mapping) and slot.get("active"):
            out[f"slot{k}.description"] = str(slot.get("description", ""))
            out[f"slot{k}.program"] = str(slot.get("program_source", ""))
    return out


def find_matches(candidates: Sequence[Mapping[str, Any]], examples: Iterable[Any], *, min_chars: int = 4,
                 ngram: int = 8) -> list[Match]:
    """Gold content of `examples` found in any candidate library (see the module docstring)."""
    golds = []
    for ex in examples:
        for g in gold_texts(ex):
            norm = normalise(g)
            words = norm.split()
            kind = "ngram" if len(words) > ngram else "answer"
            if kind == "answer" and len(norm) < min_chars:
                continue
            golds.append((str(ex.get("id")), str(ex.get("family")), kind, norm, word_ngrams(g, ngram)))
    matches: list[Match] = []
    for idx, lib in enumerate(candidates):
        for section, text in library_texts(lib).items():
            norm = f" {normalise(text)} "
            grams = word_ngrams(text, ngram)
            for rid, fam, kind, g, g_grams in golds:
                if kind == "answer" and f" {g} " in norm:
                    matches.append(Match(idx, section, rid, fam, kind, g))
                elif kind == "ngram":
                    for shared in sorted(g_grams & grams)[:3]:
                        matches.append(Match(idx, section, rid, fam, kind, shared))
    return matches


def summary(matches: Sequence[Match]) -> dict[str, Any]:
    by_family: dict[str, int] = {}
    by_candidate: dict[int, int] = {}
    for m in matches:
        by_family[m.family] = by_family.get(m.family, 0) + 1
        by_candidate[m.candidate] = by_candidate.get(m.candidate, 0) + 1
    return {"matches": len(matches), "by_family": by_family, "by_candidate": by_candidate,
            "rows": sorted({m.row_id for m in matches})}


def redact(library: Mapping[str, Any], matches: Sequence[Match]) -> dict[str, Any]:
    """A copy of `library` with every matched phrase replaced by "[redacted]" (case-insensitive, across
    punctuation and whitespace)."""
    lib = json.loads(json.dumps(library))
    phrases = sorted({m.text for m in matches}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for p in phrases:
            pattern = r"[\W_]+".join(re.escape(w) for w in p.split())
            text = re.sub(rf"(?i)(?<!\w){pattern}(?!\w)", REDACTED, text)
        return text

    lib["router"] = scrub(str(lib.get("router", "")))
    for slot in lib.get("slots") or []:
        if isinstance(slot, dict) and slot.get("active"):
            slot["description"] = scrub(str(slot.get("description", "")))
            slot["program_source"] = scrub(str(slot.get("program_source", "")))
    return lib


def ablation(library: Mapping[str, Any], matches: Sequence[Match], rows: Sequence[Any],
             score: Callable[[Mapping[str, Any], Sequence[Any]], Sequence[float]]) -> dict[str, Any]:
    """Mean reward on `rows` with the library as it is and with its matched content redacted."""
    if not matches or not rows:
        return {"rows": len(rows), "with": None, "without": None, "difference": None}
    with_, without = list(score(library, rows)), list(score(redact(library, matches), rows))
    a, b = sum(with_) / len(with_), sum(without) / len(without)
    return {"rows": len(rows), "with": a, "without": b, "difference": a - b}


def ablate_run(run_dir: Path, run: Mapping[str, Any], matches: Sequence[Match], mix: Any,
               data: str | None = None) -> dict[str, Any]:
    """The ablation on a finished run: its selected library with and without its matched content, on the
    affected training rows and on the test rows, scored with the run's own context (`data`: the run's --data
    directory when the recorded one does not resolve from here)."""
    from benchmarks.run import build_program, context_for_run
    from dspy_adaptive.record.experiment import score_split
    best = run["best_idx"]
    mine = [m for m in matches if m.candidate == best]
    if not mine:
        return {"candidate": best, "train": None, "test": None, "note": "the selected library has no match"}
    ctx = context_for_run(run_dir, data)
    try:
        def score(library: Mapping[str, Any], rows: Sequence[Any]) -> list[float]:
            program = build_program("adaptive", {"library": library}, ctx, ctx.roles)
            import dspy
            with dspy.context(lm=ctx.roles.deep):
                return [s.score for s in score_split(program, rows, ctx.metric)]

        affected = {m.row_id for m in mine}
        train_rows = [ex for ex in mix.train if str(ex.id) in affected]
        return {"candidate": best, "train": ablation(run["candidates"][best], mine, train_rows, score),
                "test": ablation(run["candidates"][best], mine, mix.test, score)}
    finally:
        ctx.pool.close()


def render(summ: Mapping[str, Any], matches: Sequence[Match], limit: int = 30) -> str:
    lines = ["# Memorisation audit", "", f"Gold training/validation content found in archived libraries: "
             f"{summ['matches']} matches over {len(summ['rows'])} rows.", ""]
    if summ["by_family"]:
        lines += ["| family | matches |", "|---|---:|"]
        lines += [f"| {f} | {n} |" for f, n in sorted(summ["by_family"].items())]
        lines += ["", "| candidate | matches |", "|---:|---:|"] + [
            f"| {c} | {n} |" for c, n in sorted(summ["by_candidate"].items())]
        lines += ["", "| candidate | section | row | kind | text |", "|---:|---|---|---|---|"]
        lines += [f"| {m.candidate} | {m.section} | {m.row_id} | {m.kind} | `{m.text[:80]}` |" for m in matches[:limit]]
    abl = summ.get("ablation")
    if abl:
        lines += ["", f"## Ablation on the selected library (#{abl['candidate']})", ""]
        if abl.get("note"):
            lines.append(abl["note"] + ".")
        for split in ("train", "test"):
            a = abl.get(split)
            if a and a.get("with") is not None:
                lines.append(f"- {split} ({a['rows']} rows): reward {a['with']:.3f} with the matched content, "
                             f"{a['without']:.3f} without it (difference {a['difference']:+.3f})")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.audit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN_DIR", help="a finished benchmarks.run --out directory of an Adaptive-GEPA run")
    p.add_argument("--data", help="the run's --data directory (default: the one in its results.json)")
    p.add_argument("--min-chars", type=int, default=4, help="shortest gold answer searched for (default 4)")
    p.add_argument("--ngram", type=int, default=8, help="n of the word n-grams of longer gold outputs (default 8)")
    p.add_argument("--ablate", action="store_true",
                   help="re-score the affected training rows and the test rows with the selected library as it is "
                        "and with its matched content redacted (runs the run's own LMs again)")
    args = p.parse_args(argv)
    run_dir = Path(args.run)
    record, results = run_dir / "search" / "run.json", run_dir / "results.json"
    if not record.is_file() or not results.is_file():
        p.exit(2, f"{p.prog}: error: {run_dir} has no search/run.json and results.json: give a finished "
                  "benchmarks.run --method adaptive --out directory\n")
    res = json.loads(results.read_text(encoding="utf-8"))
    cfg = res.get("config") or {}
    from benchmarks.data import load_mixture
    data = args.data or cfg.get("data")
    sizes = cfg.get("sizes") if isinstance(cfg.get("sizes"), dict) else None
    mix = load_mixture("hf" if data == "hf" else "local", data_dir=None if data == "hf" else data,
                       seed=int(cfg.get("seed", 43)), sizes=sizes)
    run = json.loads(record.read_text(encoding="utf-8"))
    matches = find_matches(run["candidates"], mix.train + mix.val, min_chars=args.min_chars, ngram=args.ngram)
    summ = summary(matches)
    if args.ablate:
        summ["ablation"] = ablate_run(run_dir, run, matches, mix, args.data)
    text = render(summ, matches)
    (run_dir / "audit.md").write_text(text, encoding="utf-8")
    (run_dir / "audit.json").write_text(json.dumps({"summary": summ, "matches": [asdict(m) for m in matches]},
                                                   indent=1), encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
