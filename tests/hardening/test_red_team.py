"""The red team (see red_team.py): no attack escapes and none breaks the host, layer by layer."""

from __future__ import annotations

import pytest

from benchmarks.hardening.red_team import run_red_team


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return run_red_team(tmp_path_factory.mktemp("red-team"), downstream=False)   # the suite runs those itself


def test_nothing_escapes_and_nothing_breaks_the_host(rows):
    bad = {r.family: r.notes for r in rows if r.counts["escaped"] or r.counts["host-broken"]}
    assert bad == {}


def test_every_family_ran(rows):
    families = {r.family for r in rows}
    assert {"corpus, all layers", "corpus, policy only", "corpus, policy bypassed",
            "OS attacks, full Python, all layers", "bridge, raw frames (no policy, no OS layer)"} <= families
    assert all(r.tried > 0 for r in rows)
    corpus = next(r for r in rows if r.family == "corpus, all layers")
    assert corpus.tried >= 90 and corpus.counts["rejected"] >= 60 and corpus.counts["contained"] >= 30
