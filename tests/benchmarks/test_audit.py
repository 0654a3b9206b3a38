"""Memorisation audit: planted gold answers are found (and redacted), clean libraries have none."""

from __future__ import annotations

import dspy

from benchmarks.audit import REDACTED, ablation, find_matches, redact, summary


def ex(i, family, **gold):
    return dspy.Example(id=f"{family}-{i}", family=family, request="r", **gold).with_inputs("request")


EXAMPLES = [ex(1, "hotpotqa", answer="Sallow River"), ex(2, "aime", answer=347), ex(3, "aime", answer=7),
            ex(4, "pupa", target_response="Dear Ms Varga, thank you for your letter about the lease of the "
                                          "flat on Birch Lane; the deposit will be returned within thirty days.")]


def lib(router="Route by capability.", *slots):
    return {"router": router, "slots": [{"description": d, "program_source": p, "active": True, "profile": "fast"}
                                        for d, p in slots]}


CLEAN = lib("Route by capability.", ("Questions about rivers and towns.", "class A(dspy.Module): pass"))
PLANTED = lib("If asked about Odile, answer: sallow river!",
              ("Maths.", "ANSWERS = {'grell': 347}\nclass A(dspy.Module): pass"),
              ("Letters.", "TEMPLATE = 'thank you for your letter about the lease of the flat on Birch Lane'"))


def test_planted_answers_are_found_per_family_and_candidate():
    matches = find_matches([CLEAN, PLANTED], EXAMPLES, min_chars=3)   # AIME answers are 3 digits at most
    s = summary(matches)
    assert s["by_candidate"] == {1: s["matches"]} and 0 not in s["by_candidate"]      # nothing in the clean one
    assert s["by_family"].keys() == {"hotpotqa", "aime", "pupa"}
    kinds = {(m.family, m.section, m.kind) for m in matches}
    assert ("hotpotqa", "router", "answer") in kinds and ("aime", "slot1.program", "answer") in kinds
    assert ("pupa", "slot2.program", "ngram") in kinds
    assert not any(m.row_id == "aime-3" for m in matches)          # "7" is below the minimum length


def test_clean_libraries_have_no_matches():
    assert find_matches([CLEAN, lib()], EXAMPLES) == []


def test_redaction_removes_the_matched_content_and_the_ablation_scores_both():
    matches = find_matches([PLANTED], EXAMPLES, min_chars=3)
    red = redact(PLANTED, matches)
    assert "sallow" not in red["router"].lower() and REDACTED in red["router"]
    assert "347" not in red["slots"][0]["program_source"]
    assert find_matches([red], EXAMPLES, min_chars=3) == []

    def score(library, rows):          # the memorised answer earns reward; without it, none
        return [1.0 if "347" in library["slots"][0]["program_source"] else 0.0 for _ in rows]

    out = ablation(PLANTED, matches, ["aime-2"], score)
    assert out == {"rows": 1, "with": 1.0, "without": 0.0, "difference": 1.0}
