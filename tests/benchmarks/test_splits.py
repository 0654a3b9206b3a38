"""Topic-disjoint HotpotQA splits and measured overlap for every family."""

from __future__ import annotations

import random

from benchmarks.data import load_mixture, split_hotpotqa
from benchmarks.splits import disjoint_split, family_overlap, ngrams, overlap_report


def q(i, titles, question=None):
    return {"id": str(i), "question": question or f"question number {i} about things", "answer": "x",
            "supporting_titles": titles}


def test_no_title_is_in_two_splits_even_when_topics_chain():
    rng = random.Random(0)
    rows = [q(i, [f"T{rng.randint(0, 150)}", f"T{rng.randint(0, 150)}"]) for i in range(120)]   # chains of topics
    splits = split_hotpotqa(rows, None, (20, 20, 40), seed=1)
    seen = [{t for ex in part for t in ex.supporting_titles} for part in (splits.train, splits.val, splits.test)]
    assert not seen[0] & seen[1] and not seen[0] & seen[2] and not seen[1] & seen[2]
    assert len(splits.test) >= 20 and splits.train and splits.val
    report = family_overlap("hotpotqa", splits.train, splits.val, splits.test)
    assert all(e["shared_titles"] == 0 for e in report.values())


def test_the_official_train_file_drops_questions_sharing_a_held_out_title():
    dev = [q(i, [f"D{i}", "Shared" if i == 0 else f"E{i}"]) for i in range(10)]
    train = [q(100 + i, [f"R{i}", "Shared" if i < 5 else f"S{i}"]) for i in range(10)]
    s = split_hotpotqa(dev, train, (10, 5, 5), seed=0)
    held = {t for ex in s.val + s.test for t in ex.supporting_titles}
    assert all(not held & set(ex.supporting_titles) for ex in s.train)
    if "Shared" in held:
        assert len(s.train) == 5


def test_disjoint_split_respects_sizes():
    rows = [q(i, [f"T{i // 3}", f"U{i}"]) for i in range(30)]        # topics shared by 3 questions each
    parts = disjoint_split(rows, (9, 6, 9), random.Random(0), lambda r: r["supporting_titles"])
    assert all(len(p) <= n for p, n in zip(parts, (9, 6, 9))) and sum(map(len, parts)) >= 18
    owners = [{t for r in p for t in r["supporting_titles"]} for p in parts]
    assert not owners[0] & owners[1] and not owners[0] & owners[2] and not owners[1] & owners[2]


def test_overlap_report_counts_8gram_sharing_requests():
    text = "one two three four five six seven eight"
    report = overlap_report({"train": [text, "nothing shared here at all in this request okay"],
                             "test": [text + " nine", "completely different words are used in this one now"]},
                            request=lambda x: x)
    assert report["train~test"] == {"ngram_share": 0.5, "ngram_requests": 1}
    assert ngrams("a b c") == set()


def test_every_family_reports_its_overlap(shared_data):
    mix = load_mixture("local", data_dir=shared_data, seed=43)
    for fam, s in mix.families.items():
        report = family_overlap(fam, s.train, s.val, s.test)
        assert set(report) == {"train~val", "train~test", "val~test"}
        if fam == "hotpotqa":
            assert all(e["shared_titles"] == 0 for e in report.values())
