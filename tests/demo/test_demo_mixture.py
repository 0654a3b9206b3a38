"""Schema checks for the built-in mini mixture and its loader."""

import json
import re
from collections import Counter

import dspy
import pytest

from dspy_adaptive.demo import (
    FAMILIES,
    SPLITS,
    demo_corpus_path,
    load_demo_corpus,
    load_demo_mixture,
    load_family,
)

COMMON = {"id", "split", "request", "family", "subtask"}
GOLD = {
    "hotpotqa": {"answer", "supporting_titles"},
    "aime": {"answer", "solution"},
    "pupa": {"target_response", "pii_units"},
    "livebench_if": {"prompt", "instruction_id_list", "kwargs"},
}
IF_SUBTASKS = {"paraphrase", "simplify", "story_generation", "summarize"}
# IFEval instruction ids we allow, with the kwargs each one takes.
IF_KWARGS = {
    "punctuation:no_comma": set(),
    "length_constraints:number_words": {"relation", "num_words"},
    "detectable_format:title": set(),
    "change_case:english_lowercase": set(),
    "keywords:existence": {"keywords"},
    "detectable_format:number_bullet_lists": {"num_bullets"},
    "startend:end_checker": {"end_phrase"},
    "detectable_content:postscript": {"postscript_marker"},
}


@pytest.fixture(scope="module")
def rows():
    return {f: load_family(f) for f in FAMILIES}


@pytest.fixture(scope="module")
def corpus():
    return {r["title"]: " ".join(r["sentences"]) for r in load_demo_corpus()}


def test_ids_unique_and_fields_present(rows):
    ids = [r["id"] for f in FAMILIES for r in rows[f]]
    assert len(ids) == len(set(ids))
    for family in FAMILIES:
        for r in rows[family]:
            assert set(r) == COMMON | GOLD[family], r["id"]
            assert r["family"] == family
            assert isinstance(r["request"], str) and len(r["request"]) > 10
            if family == "livebench_if":
                assert r["subtask"] in IF_SUBTASKS
            else:
                assert r["subtask"] == family


def test_split_sizes(rows):
    for family in FAMILIES:
        counts = Counter(r["split"] for r in rows[family])
        assert counts == {"train": 8, "val": 8, "test": 8}, family
    for split in SPLITS:
        subtasks = Counter(r["subtask"] for r in rows["livebench_if"] if r["split"] == split)
        assert set(subtasks) == IF_SUBTASKS


def test_corpus_well_formed(corpus):
    rows = [json.loads(line) for line in open(demo_corpus_path(), encoding="utf-8")]
    assert len(rows) >= 40 and len(corpus) == len(rows)  # titles unique
    for r in rows:
        assert set(r) == {"title", "sentences"} and r["sentences"] and all(isinstance(s, str) for s in r["sentences"])


def test_multihop_support(rows, corpus):
    for r in rows["hotpotqa"]:
        titles = r["supporting_titles"]
        assert len(titles) == 2 and len(set(titles)) == 2, r["id"]
        assert all(t in corpus for t in titles), r["id"]
        assert any(r["answer"] in corpus[t] for t in titles), r["id"]
        assert r["answer"].lower() not in r["request"].lower(), r["id"]


def test_integer_answers(rows):
    for r in rows["aime"]:
        assert str(int(r["answer"])) == r["answer"], r["id"]
        assert r["answer"] in r["solution"], r["id"]


def test_pii_units_verbatim(rows):
    for r in rows["pupa"]:
        assert r["pii_units"] and all(isinstance(u, str) and u for u in r["pii_units"]), r["id"]
        for unit in r["pii_units"]:
            assert unit in r["request"], (r["id"], unit)
        assert r["target_response"].strip()
        for email in re.findall(r"[\w.+-]+@[\w.-]+", r["request"]):
            assert email.rstrip(".").endswith(".example"), email  # reserved domain: clearly fictional


def test_ifeval_constraints_well_formed(rows):
    for r in rows["livebench_if"]:
        assert r["prompt"] == r["request"]
        ids, kwargs = r["instruction_id_list"], r["kwargs"]
        assert ids and len(ids) == len(kwargs) and len(set(ids)) == len(ids), r["id"]
        for iid, kw in zip(ids, kwargs):
            assert iid in IF_KWARGS, iid
            assert set(kw) == IF_KWARGS[iid], (r["id"], iid, kw)
            if iid == "length_constraints:number_words":
                assert kw["relation"] in ("less than", "at least") and isinstance(kw["num_words"], int)
            if iid == "keywords:existence":
                assert kw["keywords"] and all(isinstance(k, str) and k for k in kw["keywords"])
            if iid == "detectable_format:number_bullet_lists":
                assert isinstance(kw["num_bullets"], int) and kw["num_bullets"] > 0
            if iid == "startend:end_checker":
                assert isinstance(kw["end_phrase"], str) and kw["end_phrase"] in r["request"]
            if iid == "detectable_content:postscript":
                assert kw["postscript_marker"] in r["request"]


def test_loader_returns_examples_with_request_input_only():
    train, val, test = load_demo_mixture()
    assert (len(train), len(val), len(test)) == (32, 32, 32)
    for split, examples in zip(SPLITS, (train, val, test)):
        for ex in examples:
            assert isinstance(ex, dspy.Example)
            assert set(ex.inputs().keys()) == {"request"}
            assert ex.split == split and ex.family in FAMILIES
            assert "family" in ex.labels() and "subtask" in ex.labels()
    assert [ex.family for ex in train[:4]] == list(FAMILIES)  # interleaved
    assert len({ex.id for ex in train + val + test}) == 96


def test_loader_family_subset_and_unknown():
    train, _, _ = load_demo_mixture(families=["aime"])
    assert {ex.family for ex in train} == {"aime"} and len(train) == 8
    with pytest.raises(ValueError):
        load_family("nope")
