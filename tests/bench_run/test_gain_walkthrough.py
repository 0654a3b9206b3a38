"""The README's "Is the gain real?" walk-through run as written (its offline RUN line: scripted LMs, the real
samples, tiny splits), and every protocol claim checked on the run directories it writes: labels by what
differs, d_z where differences have no spread, too-small comparisons, unpaired and duplicate requests, the
memorisation ablation and the trajectory path metrics (issue 30). One module-scoped walk-through (~20 s) is
shared by every test here."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from benchmarks import audit, protocol
from benchmarks import run as bench
from benchmarks import trajectory as tj
from tests.conftest import REPO, require_shared_data

METHODS = ("seed", "one-shot", "adaptive", "gepa-fpa-all")
SEEDS = (0, 1, 2)


def walkthrough_script() -> str:
    """The README's bash block of "Is the gain real?", with its RUN line replaced by the commented offline one."""
    section = (REPO / "README.md").read_text(encoding="utf-8").split("## Is the gain real?", 1)[1].split("\n## ")[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    offline = re.search(r'^#\s+(RUN="--scripted[^"]*")$', block, re.M)
    assert offline, "the README block should give its offline RUN line as a comment"
    lines = block.splitlines()
    assert sum(line.startswith('RUN="') for line in lines) == 1
    return "\n".join(offline.group(1) if line.startswith('RUN="') else line for line in lines)


@dataclass
class Walk:
    cwd: Path            # where the block ran (runs/ is below it; ../shared/data resolves to the samples)
    stdout: str

    def run_dir(self, name: str, seed: int | None = None) -> Path:
        d = self.cwd / "runs" / name
        return d if seed is None else d / f"seed-{seed}"

    def results(self, name: str, seed: int) -> dict:
        return json.loads((self.run_dir(name, seed) / "results.json").read_text())


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Walk:
    data = require_shared_data()
    root = tmp_path_factory.mktemp("gain")
    (root / "shared").mkdir()
    (root / "shared" / "data").symlink_to(data, target_is_directory=True)
    cwd = root / "checkout"
    cwd.mkdir()
    script = 'set -euo pipefail\npython() { "$WALK_PYTHON" "$@"; }\n' + walkthrough_script()
    env = {**os.environ, "WALK_PYTHON": sys.executable, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"the README walk-through failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return Walk(cwd, proc.stdout)


@pytest.fixture
def in_walk(walk, monkeypatch) -> Walk:
    """Work where the walk-through ran, as its user would (its runs recorded --data ../shared/data)."""
    monkeypatch.chdir(walk.cwd)
    return walk


def tiny(*extra: str) -> list[str]:
    """The README's offline RUN line (run from the walk-through's directory), plus `extra`."""
    return ["--scripted", "--data", "../shared/data", "--sizes", "2,2,2", "--budget", "60", "--num-threads", "2",
            "--no-progress", *extra]


def diffs(walk: Walk, ref: str, other: str, family: str | None = None, seed: int | None = None) -> np.ndarray:
    """Paired differences other - ref recomputed from the two runs' results.json files."""
    out = []
    for s in SEEDS if seed is None else (seed,):
        a = {r["id"]: r for r in walk.results(ref, s)["test"]}
        for r in walk.results(other, s)["test"]:
            if r["id"] in a and (family is None or r["family"] == family):
                out.append(r["score"] - a[r["id"]]["score"])
    return np.array(out)


# -- the walk-through itself ---------------------------------------------------------------------------------

def test_the_readme_walkthrough_runs_as_written(walk):
    for m in METHODS:
        for s in SEEDS:
            res = walk.results(m, s)
            assert res["method"] == m and res["config"]["seed"] == s and len(res["test"]) == 8
    report = json.loads((walk.run_dir("protocol") / "protocol.json").read_text())
    assert report["reference"] == "seed" and set(report["comparison"]) == {"one-shot", "adaptive", "gepa-fpa-all"}
    assert all(not rows for rows in report["unpaired"].values())        # same seeds, same splits: all paired
    md = (walk.run_dir("protocol") / "protocol.md").read_text()
    assert "## adaptive" in md and "Every request of every seed paired with seed." in md
    assert "## Ablation on the selected library" in (walk.run_dir("adaptive", 0) / "audit.md").read_text()
    assert "# Trajectory and item-level diagnostics" in walk.stdout
    # step 5, the feedback ablation: two configurations of one method, compared
    for s in SEEDS:
        assert walk.results("adaptive-scalar", s)["config"]["feedback"] == "scalar"
    ablation = json.loads((walk.run_dir("ablation") / "protocol.json").read_text())
    assert ablation["reference"] == "adaptive" and list(ablation["comparison"]) == ["adaptive[feedback=scalar]"]
    assert ablation["comparison"]["adaptive[feedback=scalar]"]["overall"]["pooled"]["n"] == 24


# -- 1. labels -----------------------------------------------------------------------------------------------

def test_configurations_of_one_method_are_labelled_by_what_differs(in_walk, tmp_path):
    walk = in_walk
    sel, k3 = tmp_path / "adaptive-sel", tmp_path / "adaptive-k3"
    bench.main(["--method", "adaptive", "--out", str(sel), "--seed", "0", "--selection-split", "1"] + tiny())
    bench.main(["--method", "adaptive", "--out", str(k3), "--seed", "0", "--max-specialists", "3"] + tiny())
    runs = protocol.find_runs([walk.run_dir("adaptive"), walk.run_dir("adaptive-scalar"), sel, k3])
    assert {r.label for r in runs} == {"adaptive", "adaptive[feedback=scalar]", "adaptive[selection_split=1]",
                                       "adaptive[max_specialists=3]"}
    out = tmp_path / "p"
    assert protocol.main([str(walk.run_dir("adaptive")), str(walk.run_dir("adaptive-scalar")), str(sel), str(k3),
                          "--reference", "adaptive", "--out", str(out), "--resamples", "199"]) == 0
    report = json.loads((out / "protocol.json").read_text())
    assert set(report["comparison"]) == {"adaptive[feedback=scalar]", "adaptive[selection_split=1]",
                                         "adaptive[max_specialists=3]"}
    # the one-seed runs pair on seed 0 only, and say so for seeds 1 and 2
    assert report["comparison"]["adaptive[max_specialists=3]"]["overall"]["pooled"]["n"] == 8
    assert [(u["seed"], u["only_reference"], u["why"]) for u in report["unpaired"]["adaptive[max_specialists=3]"]] \
        == [(1, 8, "no adaptive[max_specialists=3] run with seed 1"),
            (2, 8, "no adaptive[max_specialists=3] run with seed 2")]


def test_a_reference_by_directory_and_names_of_ones_own(walk, tmp_path, capsys):
    a, b = str(walk.run_dir("adaptive")), str(walk.run_dir("adaptive-scalar"))
    assert protocol.main([a, b, "--reference", a, "--out", str(tmp_path / "dir"), "--resamples", "99"]) == 0
    assert list(json.loads((tmp_path / "dir" / "protocol.json").read_text())["comparison"]) == \
        ["adaptive[feedback=scalar]"]
    assert protocol.main([f"decomposed={a}", f"scalar={b}", "--reference", "decomposed", "--out",
                          str(tmp_path / "named"), "--resamples", "99"]) == 0
    assert "## scalar" in (tmp_path / "named" / "protocol.md").read_text()
    copy = tmp_path / "adaptive-again"                 # the same configuration twice cannot be told apart ...
    shutil.copytree(walk.run_dir("adaptive"), copy)
    with pytest.raises(SystemExit) as e:
        protocol.main([a, str(copy), "--reference", "adaptive", "--out", str(tmp_path / "x")])
    assert e.value.code == 2 and "NAME=RUN_DIR" in capsys.readouterr().err
    assert protocol.main([a, f"again={copy}", "--reference", "adaptive", "--out", str(tmp_path / "again"),
                          "--resamples", "99"]) == 0                # ... until one is named
    with pytest.raises(SystemExit) as e:
        protocol.main([a, b, "--reference", "nothing"])
    assert e.value.code == 2 and "adaptive[feedback=scalar]" in capsys.readouterr().err   # it lists the labels


# -- 2. d_z --------------------------------------------------------------------------------------------------

def test_dz_is_undefined_where_the_differences_have_no_spread(walk):
    report = json.loads((walk.run_dir("protocol") / "protocol.json").read_text())
    checked = 0
    for label, fams in report["comparison"].items():
        for fam, keyed in fams.items():
            d = diffs(walk, "seed", label, None if fam == "overall" else fam)
            s = keyed["pooled"]
            assert s["n"] == len(d) and s["diff"] == pytest.approx(d.mean())
            if np.allclose(d, d[0]):                          # every difference the same, 0 included
                assert s["effect_size"] is None
                checked += 1
            else:
                assert s["effect_size"] == pytest.approx(d.mean() / d.std(ddof=1))
    assert checked >= 3
    ablation = json.loads((walk.run_dir("ablation") / "protocol.json").read_text())
    pooled = ablation["comparison"]["adaptive[feedback=scalar]"]["overall"]["pooled"]
    assert not diffs(walk, "adaptive", "adaptive-scalar").any()               # scripted: identical scores
    assert pooled["effect_size"] is None and pooled["p_value"] == 1.0 and not pooled["significant"]
    row = next(line for line in (walk.run_dir("ablation") / "protocol.md").read_text().splitlines()
               if line.startswith("| overall | pooled | 24 |"))
    assert [c.strip() for c in row.split("|")][6:11] == ["+0.000", "[+0.000, +0.000]", "1", "—", "0/24/0"]


# -- 3. too small ----------------------------------------------------------------------------------------------

def test_comparisons_below_the_minimum_are_too_small_and_never_starred(walk):
    report = json.loads((walk.run_dir("protocol") / "protocol.json").read_text())
    small = 0
    for fams in report["comparison"].values():
        for keyed in fams.values():
            for s in keyed.values():
                if s["n"] < 6:
                    small += 1
                    assert s["too_small"] and s["verdict"] == "too small" and not s["significant"]
                    assert s["ci_low"] is s["ci_high"] is s["p_value"] is s["effect_size"] is None
                else:
                    excludes = s["ci_low"] > 0 or s["ci_high"] < 0
                    assert s["significant"] == (excludes and s["p_value"] < 0.05)
    assert small == 3 * 4 * 3                      # every family of every seed has 2 pairs
    md = (walk.run_dir("protocol") / "protocol.md").read_text()
    rows = [line for line in md.splitlines() if re.match(r"\| \w+ \| \d \| 2 \|", line)]
    assert len(rows) == 36 and all("too small (n < 6)" in r and " *" not in r for r in rows)
    # aime: adaptive wins both requests of each seed (was starred as [+1, +1] with p = 0.5); pooled over the
    # three seeds, six wins out of six is enough
    aime = report["comparison"]["adaptive"]["aime"]
    assert aime["0"]["wins"] == 2 and aime["0"]["too_small"]
    assert aime["pooled"]["wins"] == 6 and aime["pooled"]["p_value"] == pytest.approx(2 / 64)
    assert aime["pooled"]["significant"]


# -- 4. unpaired and duplicate requests ----------------------------------------------------------------------

def test_unpaired_requests_are_counted_with_the_reason(in_walk, tmp_path):
    walk = in_walk
    other = tmp_path / "seed-333"
    bench.main(["--method", "seed", "--out", str(other), "--seeds", "0,1"] + tiny("--sizes", "3,3,3"))
    out = tmp_path / "p"
    assert protocol.main([str(other), str(walk.run_dir("adaptive")), "--reference", "seed", "--out", str(out),
                          "--resamples", "99"]) == 0
    report = json.loads((out / "protocol.json").read_text())
    unpaired = {u["seed"]: u for u in report["unpaired"]["adaptive"]}
    paired = 0
    for s in (0, 1):
        ref = {r["id"] for r in json.loads((other / f"seed-{s}" / "results.json").read_text())["test"]}
        mine = {r["id"] for r in walk.results("adaptive", s)["test"]}
        assert len(ref) == 12 and len(mine) == 8
        assert (unpaired[s]["only_reference"], unpaired[s]["only_method"]) == (len(ref - mine), len(mine - ref))
        assert "sizes differ" in unpaired[s]["why"]
        paired += len(ref & mine)
    assert unpaired[2] == {"seed": 2, "only_reference": 0, "only_method": 8, "why": "no seed run with seed 2"}
    assert report["comparison"]["adaptive"]["overall"]["pooled"]["n"] == paired
    dropped = sum(u["only_reference"] + u["only_method"] for u in unpaired.values())
    md = (out / "protocol.md").read_text()
    assert f"Not compared ({dropped} requests):" in md and "- seed 2: 8 only in the adaptive run -- no seed run" in md


def test_a_request_listed_twice_in_one_run_is_refused(walk, tmp_path, capsys):
    dup = tmp_path / "dup"
    shutil.copytree(walk.run_dir("adaptive", 0), dup)
    res = json.loads((dup / "results.json").read_text())
    res["test"].append({**res["test"][0], "score": 1.0 - res["test"][0]["score"]})
    (dup / "results.json").write_text(json.dumps(res))
    with pytest.raises(SystemExit) as e:
        protocol.main([str(walk.run_dir("seed", 0)), str(dup), "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"request {res['test'][0]['id']} is listed twice" in err


# -- 5. topic-disjoint HotpotQA splits in a run ----------------------------------------------------------------

def _question(qid, titles):
    return {"id": qid, "question": f"Which article links {' and '.join(titles)}?", "answer": "unknown",
            "supporting_titles": titles, "supporting_facts": [[t, 0] for t in titles]}


def _data_with_hotpotqa(root: Path, rows: list[dict]) -> Path:
    """A --data directory: the real samples of every other family, and these HotpotQA rows."""
    data = require_shared_data()
    root.mkdir()
    for f in data.iterdir():
        if f.name != "hotpotqa.jsonl":
            (root / f.name).symlink_to(f)
    (root / "hotpotqa.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def _chain(prefix, n):
    return [_question(f"{prefix}{i}", [f"{prefix}{i}", f"{prefix}{i + 1}"]) for i in range(n)]


def _hub(prefix, n):
    return [_question(f"{prefix}{i}", [f"{prefix} hub", f"{prefix}{i}"]) for i in range(n)]


def _run_seed(data: Path, out: Path) -> dict:
    bench.main(["--method", "seed", "--out", str(out), "--scripted", "--data", str(data), "--sizes", "1,1,1",
                "--sizes", "hotpotqa=12,12,24", "--budget", "1", "--num-threads", "2", "--no-progress"])
    return json.loads((out / "results.json").read_text())


def test_runs_get_full_topic_disjoint_splits_or_say_exactly_why_not(tmp_path):
    full = _run_seed(_data_with_hotpotqa(tmp_path / "chains", _chain("A", 12) + _chain("B", 12) + _chain("C", 24)),
                     tmp_path / "full")
    assert full["sizes"]["hotpotqa"] == [12, 12, 24]
    assert all(e["shared_titles"] == 0 for e in full["split_overlap"]["hotpotqa"].values())
    assert not [n for n in full["notes"] if n.startswith("hotpotqa:") and ("wanted" in n or "requested" in n)]
    short = _run_seed(_data_with_hotpotqa(tmp_path / "hubs", _hub("P", 20) + _hub("Q", 20) + _hub("R", 8)),
                      tmp_path / "short")
    assert sum(short["sizes"]["hotpotqa"]) == 40 and 0 not in short["sizes"]["hotpotqa"]
    note = next(n for n in short["notes"] if "topic-disjointness placed" in n)
    assert "title conflicts: the 48 rows form 3 groups" in note and "8 of the 48 rows left out" in note
    assert not any("rows are available" in n for n in short["notes"] if n.startswith("hotpotqa"))
    assert note in (tmp_path / "short" / "tables.md").read_text()
    with pytest.raises(SystemExit, match=r"\[data\] hotpotqa: the validation split would be empty .*title conflicts"):
        _run_seed(_data_with_hotpotqa(tmp_path / "two", _hub("P", 30) + _hub("Q", 18)), tmp_path / "refused")
    assert not (tmp_path / "refused" / "results.json").exists()


# -- 6. the memorisation ablation and trajectories on real run directories -----------------------------------

def _plant(run_dir: Path, program: str) -> dict:
    """Replace the selected library's retrieval specialist by `program` (in search/run.json); the library."""
    record = json.loads((run_dir / "search" / "run.json").read_text())
    lib = record["candidates"][record["best_idx"]]
    slot = next(s for s in lib["slots"] if s["active"] and "search(" in s["program_source"])
    slot["program_source"] = program
    (run_dir / "search" / "run.json").write_text(json.dumps(record))
    return lib


def _train_row(family: str):
    from benchmarks.data import load_mixture
    sizes = dict.fromkeys(("hotpotqa", "aime", "pupa", "livebench_if"), (2, 2, 2))
    mix = load_mixture("local", data_dir=require_shared_data(), seed=0, sizes=sizes)
    return next(ex for ex in mix.train if ex.family == family and len(str(ex.answer)) >= 4
                and str(ex.answer).lower() not in ("yes", "no"))


MEMORISED = '''class Researcher(dspy.Module):
    def __init__(self):
        super().__init__()
        self.answer = dspy.Predict("context, request -> response", instructions="Answer with a short phrase.")

    def forward(self, request):
        if request.strip() == {question!r}:
            return dspy.Prediction(response={answer!r})
        return dspy.Prediction(response="unknown")
'''


def test_audit_ablation_shows_memorised_content_earning_reward(walk, tmp_path):
    run_dir = tmp_path / "memorised"
    shutil.copytree(walk.run_dir("adaptive", 0), run_dir)
    ex = _train_row("hotpotqa")
    _plant(run_dir, MEMORISED.format(question=ex.request.strip(), answer=str(ex.answer)))
    assert audit.main([str(run_dir), "--data", str(require_shared_data()), "--ablate"]) == 0
    report = json.loads((run_dir / "audit.json").read_text())
    assert any(m["row_id"] == str(ex.id) and m["family"] == "hotpotqa" and m["section"].endswith(".program")
               for m in report["matches"])
    abl = report["summary"]["ablation"]
    # the memorised training row: answered from memory (1.0); redacted, the program answers "[redacted]" (0.0)
    assert abl["train"]["rows"] == len(report["summary"]["rows"]) >= 1
    assert abl["train"]["with"] > abl["train"]["without"] and abl["train"]["without"] == 0.0
    # test: HotpotQA now gets "unknown" either way; every other family scores as the run recorded it
    rows = walk.results("adaptive", 0)["test"]
    assert abl["test"]["rows"] == len(rows)
    expected = sum(r["score"] for r in rows if r["family"] != "hotpotqa") / len(rows)
    assert abl["test"]["with"] == pytest.approx(expected) and abl["test"]["difference"] == pytest.approx(0.0)
    assert "reward 1.000 with the matched content, 0.000 without it" in (run_dir / "audit.md").read_text()


def test_audit_ablation_rescored_with_the_runs_own_context_reproduces_its_test_scores(walk, tmp_path):
    run_dir = tmp_path / "commented"
    shutil.copytree(walk.run_dir("adaptive", 0), run_dir)
    ex = _train_row("hotpotqa")
    record = json.loads((run_dir / "search" / "run.json").read_text())
    lib = record["candidates"][record["best_idx"]]
    slot = next(s for s in lib["slots"] if s["active"] and "search(" in s["program_source"])
    _plant(run_dir, slot["program_source"] + f"# memorised: {ex.answer}\n")    # a comment earns nothing
    assert audit.main([str(run_dir), "--data", str(require_shared_data()), "--ablate"]) == 0
    abl = json.loads((run_dir / "audit.json").read_text())["summary"]["ablation"]
    rows = walk.results("adaptive", 0)["test"]
    assert abl["test"]["with"] == pytest.approx(sum(r["score"] for r in rows) / len(rows))
    assert abl["test"]["without"] == pytest.approx(abl["test"]["with"])
    assert abl["train"]["difference"] == pytest.approx(0.0)


def _levenshtein(a: list[str], b: list[str]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def _sections(lib: dict) -> dict[str, str]:
    out = {"router": lib["router"]}
    for k, s in enumerate(lib["slots"], start=1):
        if s["active"]:
            out |= {f"slot{k}.description": s["description"], f"slot{k}.program": s["program_source"],
                    f"slot{k}.profile": s["profile"]}
    return out


def _tokens(sections: dict[str, str]) -> list[str]:
    return [t for name in sorted(sections) for t in [f"§{name}", *re.findall(r"\w+|[^\w\s]", sections[name])]]


def test_trajectory_path_metrics_on_real_runs(walk, tmp_path):
    adaptive, oneshot, seed = (walk.run_dir(m, 0) for m in ("adaptive", "one-shot", "seed"))
    record = json.loads((adaptive / "search" / "run.json").read_text())
    lineage, todo = set(), [record["best_idx"]]                # the selected candidate and its ancestors
    while todo:
        i = todo.pop()
        if i not in lineage:
            lineage.add(i)
            todo += [p for p in record["parents"][i] or () if p is not None]
    states = []
    for i in sorted(lineage):
        s = _sections(record["candidates"][i])
        if not states or s != states[-1]:
            states.append(s)
    assert tj.main([str(adaptive), str(oneshot), "--seed-run", str(seed), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "trajectory.json").read_text())
    path = report["path"][str(adaptive)]
    assert path["committed_states"] == len(states) >= 2 and path["updates"] == len(states) - 1
    edits = [_levenshtein(_tokens(a), _tokens(b)) / max(len(_tokens(a)), len(_tokens(b)), 1)
             for a, b in zip(states, states[1:])]
    breadths = [sum(a.get(n) != b.get(n) for n in set(a) | set(b)) / len(set(a) | set(b))
                for a, b in zip(states, states[1:])]
    assert path["normalised_edits"] == pytest.approx(edits) and path["max_normalised_edit"] == pytest.approx(max(edits))
    assert path["section_breadths"] == pytest.approx(breadths)
    steps = sum(_levenshtein(_tokens(a), _tokens(b)) for a, b in zip(states, states[1:]))
    assert path["churn"] == pytest.approx(1 - _levenshtein(_tokens(states[0]), _tokens(states[-1])) / steps)
    # the one-shot run: the empty library, then the one it wrote
    one = report["path"][str(oneshot)]
    assert one["committed_states"] == 2 and one["updates"] == 1 and one["churn"] == 0.0
    # items: the two selected programs on test, gains over the seed's correct set
    correct = {m: {r["id"] for r in walk.results(m, 0)["test"] if r["score"] >= 1.0}
               for m in ("adaptive", "one-shot", "seed")}
    items = {r["id"] for r in walk.results("adaptive", 0)["test"]}
    a, b, c0 = correct["adaptive"], correct["one-shot"], correct["seed"]
    jaccard = (lambda x, y: 1.0 if not x | y else len(x & y) / len(x | y))   # noqa: E731
    assert report["items"]["J_C"] == pytest.approx(jaccard(a, b))
    assert report["items"]["J_G"] == pytest.approx(jaccard(a - c0, b - c0))
    assert report["items"]["agreement"] == pytest.approx(sum((i in a) == (i in b) for i in items) / len(items))
    assert f"| {adaptive} | {len(states)} | {len(states) - 1} |" in (tmp_path / "trajectory.md").read_text()
