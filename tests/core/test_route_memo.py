"""The router-decision memo: keys by digest, each new decision journalled once, a journal-less memo as before."""

from __future__ import annotations

import threading

from dspy_adaptive.program.route_memo import RouteMemo, digest


def test_keys_hold_digests_and_the_request_and_for_router_finds_them():
    key = RouteMemo.key("Route by family." * 500, "1: Math", {"question": "q1", "k": 2})
    assert key == (digest("Route by family." * 500), digest("1: Math"), '{"k": 2, "question": "q1"}')
    assert len(key[0]) == len(key[1]) == 32
    memo = RouteMemo({key: (1, "1")})
    assert memo.for_router("Route by family." * 500, "1: Math") == {key: (1, "1")}
    assert memo.for_router("Route by family.", "1: Math") == {}


def test_each_new_decision_reaches_the_journal_once_and_the_first_one_stays():
    seen = []
    start = RouteMemo.key("r", "s", {"q": 0})
    memo = RouteMemo({start: (0, "0")}, journal=lambda k, d: seen.append((k, d)))
    keys = [RouteMemo.key("r", "s", {"q": i}) for i in range(200)]

    def put(offset):
        for i, k in enumerate(keys):
            memo.put(k, ((i + offset) % 3, str(offset)))

    threads = [threading.Thread(target=put, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(k for k, _ in seen) == sorted(keys[1:])          # the one it started from is not journalled
    assert all(memo.get(k) == d for k, d in seen)                 # what was journalled is what the memo answers
    assert memo.get(start) == (0, "0")
    memo.update({keys[5]: (2, "other")})                          # a later answer does not replace the first
    assert memo.get(keys[5]) == dict(seen)[keys[5]] and len(seen) == 199
