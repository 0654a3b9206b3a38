"""Issue 25's classes, attacked as the report attacks them (benchmarks/hardening/): hangs and protocol
violations end within their deadline, no worker outlives its host, no cache a specialist can query is
shared, and the bridge trusts no declared shape. Nothing escapes, breaks or hangs the host."""

from __future__ import annotations

import pytest

from benchmarks.hardening import channels, hangs, orphans


def _bad(rows) -> dict[str, list[str]]:
    return {r.family: r.notes for r in rows
            if r.counts["escaped"] or r.counts["host-broken"] or r.counts["host-hung"]}


@pytest.fixture(scope="module")
def hang_rows():
    return hangs.hang_rows()


def test_every_hang_attack_ends_within_its_deadline(hang_rows):
    assert _bad(hang_rows) == {}
    assert sum(r.tried for r in hang_rows) == len(hangs.RAW_ATTACKS) + len(hangs.POLICY_ATTACKS) + 1
    for r in hang_rows:
        for o in r.outcomes:
            allowed = (2 if "behind" in o.name else 1) * hangs.TIMEOUT + hangs.SLACK
            assert o.seconds <= allowed, (o.name, o.seconds)


def test_protocol_violations_are_named_and_caught_early(hang_rows):
    raw = {o.name: o for o in hang_rows[1].outcomes}
    for name in ("requests without reading (small) replies", "requests without reading (large) replies"):
        assert "protocol violation" in raw[name].detail and raw[name].seconds < hangs.TIMEOUT / 2, raw[name]
    assert "protocol" in raw["frame is not JSON"].detail and "too large" in raw["header claims 2 GB"].detail


def test_no_worker_outlives_its_host():
    rows = orphans.orphan_rows()
    assert _bad(rows) == {}
    assert [r.tried for r in rows] == [4, 3]


def test_no_cache_channel_and_no_trusted_shape(tmp_path):
    rows = channels.cache_rows(tmp_path) + channels.shape_rows()
    assert _bad(rows) == {}
    assert all(r.tried >= 5 for r in rows)
    assert rows[2].counts["rejected"] == rows[2].tried      # every raw shape attack refused at the bridge
