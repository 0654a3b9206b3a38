"""Splits of the benchmark mixture on the real samples in ../shared/data (paper Appendix C)."""

import json
from collections import Counter

import pytest

from benchmarks import data as bdata
from benchmarks.data import DataError, livebench_article, load_family, load_mixture, scale_sizes
from dspy_adaptive.tasks import FAMILIES


@pytest.fixture(scope="module")
def mixture():
    from tests.conftest import require_shared_data
    return load_mixture(data_dir=require_shared_data(), seed=43)


def ids(examples):
    return [e.id for e in examples]


def test_local_split_sizes(mixture):
    # AIME and LiveBench-IF fit the paper's sizes; HotpotQA/PUPA samples (60 rows) scale proportionally.
    assert mixture.sizes() == {"hotpotqa": (7, 7, 46), "aime": (45, 45, 30), "pupa": (15, 15, 30),
                               "livebench_if": (45, 45, 100)}
    assert len(mixture.train) == 7 + 45 + 15 + 45
    assert any("hotpotqa" in n and "scaled" in n for n in mixture.notes)


def test_splits_disjoint_and_ids_unique(mixture):
    all_ids = ids(mixture.train) + ids(mixture.val) + ids(mixture.test)
    assert len(all_ids) == len(set(all_ids))
    for fam in FAMILIES:
        s = mixture.family(fam)
        src = [[e.source_id for e in part] for part in (s.train, s.val, s.test)]
        assert not (set(src[0]) & set(src[1]) or set(src[0]) & set(src[2]) or set(src[1]) & set(src[2])), fam


def test_uniform_schema_and_hidden_labels(mixture):
    for e in mixture.train + mixture.val + mixture.test:
        assert tuple(e.inputs().keys()) == ("request",)
        assert e.family in FAMILIES and isinstance(e.request, str) and e.request.strip()
        assert e.family not in e.id and e.source_id not in e.id  # ids carry no label
    lb = mixture.family("livebench_if")
    assert all(e.subtask in {"paraphrase", "simplify", "story_generation", "summarize"} for e in lb.train)
    assert all(e.subtask is None for e in mixture.family("aime").train)


def test_same_seed_same_splits_and_seed_scope(shared_data):
    a, b = load_mixture(data_dir=shared_data, seed=43), load_mixture(data_dir=shared_data, seed=43)
    c = load_mixture(data_dir=shared_data, seed=7)
    for part in ("train", "val", "test"):
        assert ids(getattr(a, part)) == ids(getattr(b, part))
    # the seed moves HotpotQA and LiveBench-IF sampling; AIME and PUPA splits stay fixed (paper App. I)
    assert ids(a.family("hotpotqa").test) != ids(c.family("hotpotqa").test)
    assert ids(a.family("livebench_if").val) != ids(c.family("livebench_if").val)
    for fam in ("aime", "pupa"):
        for part in ("train", "val", "test"):
            assert ids(getattr(a.family(fam), part)) == ids(getattr(c.family(fam), part))


def test_aime_pool_halved_and_2025_test(mixture):
    s = mixture.family("aime")
    assert {e.year for e in s.train + s.val} <= {2022, 2023, 2024}
    assert len({e.source_id for e in s.train + s.val}) == 90
    assert {e.year for e in s.test} == {2025} and len(s.test) == 30
    assert all(isinstance(e.answer, int) for e in s.train + s.val + s.test)
    ex = next(e for e in s.train + s.val if e.source_id == "2022-II-8")
    assert ex.answer == 80 and ex.answer_raw == "080"


def test_pupa_positional(mixture):
    s = mixture.family("pupa")
    assert [e.source_id for e in s.train] == [f"pupa_new-{i}" for i in range(15)]
    assert [e.source_id for e in s.val] == [f"pupa_new-{i}" for i in range(15, 30)]
    assert [e.source_id for e in s.test] == [f"pupa_new-{i}" for i in range(30, 60)]
    assert all(isinstance(e.pii_units, list) and e.pii_units for e in s.train)


def test_pupa_positional_rule_on_full_pool():
    rows = [{"id": f"pupa_new-{i}", "user_query": f"q{i}", "target_response": "r", "pii_units": "a||b"}
            for i in range(664)]
    s = bdata.split_pupa(rows, (45, 45, 221))
    assert [e.source_id for e in s.train] == [f"pupa_new-{i}" for i in range(45)]
    assert [e.source_id for e in s.val] == [f"pupa_new-{i}" for i in range(111, 156)]
    assert [e.source_id for e in s.test] == [f"pupa_new-{i}" for i in range(222, 443)]
    assert s.train[0].pii_units == ["a", "b"]


def test_livebench_releases_balance_and_no_article_overlap(mixture, shared_data):
    s = mixture.family("livebench_if")
    raw = {json.loads(line)["question_id"]: json.loads(line) for line in open(shared_data / "livebench_if.jsonl")}
    assert {e.release for e in s.train} == {"2024-06-24"}
    assert {e.release for e in s.val + s.test} == {"2024-11-25"}
    for part, n in ((s.train, 45), (s.val, 45), (s.test, 100)):
        counts = Counter(e.subtask for e in part)
        assert sum(counts.values()) == n and len(counts) == 4 and max(counts.values()) - min(counts.values()) <= 1
    eval_articles = {livebench_article(raw[e.source_id]) for e in s.val + s.test}
    assert not eval_articles & {livebench_article(raw[e.source_id]) for e in s.train}
    assert all(None not in kw.values() for e in s.train for kw in e.instruction_kwargs)  # nulls dropped


def test_hotpotqa_train_file_is_used_when_present(tmp_path, shared_data):
    dev = [json.loads(line) for line in open(shared_data / "hotpotqa.jsonl")]
    (tmp_path / "hotpotqa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in dev))
    # train questions on their own topics (titles no dev question uses), plus copies of dev questions
    fresh = [{**r, "id": r["id"] + "-train", "supporting_titles": [t + " (train)" for t in r["supporting_titles"]]}
             for r in dev[:30]]
    copies = [{**r, "id": r["id"] + "-copy-train"} for r in dev[:30]]
    (tmp_path / "hotpotqa_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in fresh + copies))
    s = load_family("hotpotqa", data_dir=tmp_path, sizes=(10, 10, 40))
    assert s.sizes() == (10, 10, 40)
    assert all(e.source_id.endswith("-train") for e in s.train)
    held = {t for e in s.val + s.test for t in e.supporting_titles}
    assert not held & {t for e in s.train for t in e.supporting_titles}   # a copy of a held-out question never
    assert not any(e.source_id.endswith("-train") for e in s.val + s.test)


def test_sizes_override(shared_data):
    m = load_mixture(data_dir=shared_data, sizes={"aime": (5, 6, 7), "livebench_if": (8, 4, 12)})
    assert m.family("aime").sizes() == (5, 6, 7)
    assert m.family("livebench_if").sizes() == (8, 4, 12)
    assert Counter(e.subtask for e in m.family("livebench_if").train) == Counter(
        {"paraphrase": 2, "simplify": 2, "story_generation": 2, "summarize": 2})
    with pytest.raises(ValueError, match="unknown families"):
        load_mixture(data_dir=shared_data, sizes={"gsm8k": (1, 1, 1)})


def test_missing_data_dir_says_where(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match="nowhere") as err:
        load_mixture(data_dir=missing)
    assert "data_dir" in str(err.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="aime.jsonl"):
        load_family("aime", data_dir=tmp_path / "empty")


def test_scale_sizes():
    assert scale_sizes((45, 45, 300), 1000) == (45, 45, 300)
    assert scale_sizes((45, 45, 300), 60) == (7, 7, 46)
    assert scale_sizes((111, 111, 221), 60) == (15, 15, 30)


def test_hf_converters_with_a_fake_hub(monkeypatch, shared_data):
    """The HF path cannot reach the hub here; check its record conversion with a stand-in loader."""
    aime = [json.loads(line) for line in open(shared_data / "aime.jsonl")]
    fake = {
        "AI-MO/aimo-validation-aime": [{"id": i, "problem": r["problem"], "solution": r["solution"],
                                        "answer": r["answer"], "url": r["url"]}
                                       for i, r in enumerate(aime) if r["split"] == "trainval"],
        "MathArena/aime_2025": [{"problem_idx": (1 if r["exam"] == "I" else 16) + int(r["problem_number"]) - 1,
                                 "problem": r["problem"], "answer": r["answer"]}
                                for r in aime if r["split"] == "test"],
    }
    calls = []

    def fake_load(path, name, split, revision):
        calls.append((path, revision))
        return fake[path]

    monkeypatch.setattr(bdata, "_hf_load", fake_load)
    hf = load_family("aime", source="hf")
    local = load_family("aime", data_dir=shared_data)
    for part in ("train", "val", "test"):
        assert ids(getattr(hf, part)) == ids(getattr(local, part))
    assert dict(calls)["AI-MO/aimo-validation-aime"] == bdata.HF_SOURCES["aime_trainval"]["revision"]


def test_every_hub_source_is_pinned_to_a_revision():
    """Issue 27: the runs load the same rows whenever they run (the paper's snapshot revisions are unpublished)."""
    import re

    for key, spec in bdata.HF_SOURCES.items():
        assert re.fullmatch(r"[0-9a-f]{40}", spec["revision"] or ""), key
    used = bdata.revisions_used({"pupa": "abc"})
    assert used["pupa"]["revision"] == "abc"
    assert used["hotpotqa"]["revision"] == bdata.HF_SOURCES["hotpotqa"]["revision"]
