"""BM25 fallback retrieval over the HotpotQA paragraph sample; backend selection."""

import json

import pytest

from dspy_adaptive.tasks.retrieval import ColBERTv2Retriever, make_retriever, make_search_tool


@pytest.fixture(scope="module")
def search():
    from tests.conftest import require_shared_data
    return make_search_tool(backend="bm25", corpus_path=require_shared_data() / "hotpotqa_paragraphs.jsonl")


def test_bm25_finds_a_gold_paragraph_in_top5(search, shared_data):
    items = [json.loads(line) for line in open(shared_data / "hotpotqa.jsonl")]
    hits = 0
    for it in items:
        titles = [p.split(" | ", 1)[0] for p in search(it["question"], k=5)]
        hits += any(t in titles for t in it["supporting_titles"])
    assert hits / len(items) >= 0.8


def test_search_tool_contract(search):
    assert search.__name__ == "search"
    out = search("Scott Derrickson American director", k=3)
    assert isinstance(out, list) and len(out) == 3 and json.loads(json.dumps(out)) == out
    assert out[0].startswith("Scott Derrickson | ")
    assert search("   ") == [] and search("the of and") == []
    with pytest.raises(ValueError):
        search("x", k=0)
    with pytest.raises(TypeError):
        search(["not", "a", "string"])


def test_backend_selection(tmp_path, monkeypatch):
    monkeypatch.delenv("DSPY_ADAPTIVE_COLBERT_URL", raising=False)
    assert isinstance(make_retriever(url="http://localhost:8893/api/search"), ColBERTv2Retriever)  # no request made
    monkeypatch.setenv("DSPY_ADAPTIVE_COLBERT_URL", "http://localhost:1/wiki17_abstracts")
    assert isinstance(make_retriever(), ColBERTv2Retriever)
    monkeypatch.delenv("DSPY_ADAPTIVE_COLBERT_URL")
    with pytest.raises(FileNotFoundError, match="corpus"):
        make_retriever(backend="bm25", corpus_path=tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="backend"):
        make_retriever(backend="faiss")
