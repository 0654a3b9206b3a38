"""Topic-disjoint HotpotQA splits and measured overlap for every family."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from benchmarks.data import SplitError, load_family, load_mixture, split_hotpotqa
from benchmarks.splits import disjoint_split, family_overlap, ngrams, overlap_report, topic_groups


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


# -- groups of questions linked by titles (issue 30) ---------------------------------------------------------

def chain(prefix, n):
    """n questions linked in a chain: question i has titles {prefix i, prefix i+1} (one connected group)."""
    return [q(f"{prefix}{i}", [f"{prefix}{i}", f"{prefix}{i + 1}"]) for i in range(n)]


def hub(prefix, n):
    """n questions sharing one title: a group that cannot be divided between splits."""
    return [q(f"{prefix}{i}", [f"{prefix}-hub", f"{prefix}{i}"]) for i in range(n)]


def titles_of(r):
    return r["supporting_titles"]


def assert_disjoint(parts):
    owners = [{t for r in p for t in titles_of(r)} for p in parts]
    for i in range(len(owners)):
        for j in range(i + 1, len(owners)):
            assert not owners[i] & owners[j]


def test_topic_groups_are_connected_components():
    rows = chain("A", 3) + [q("x", ["X"]), q("y", ["Y", "A2"])]      # y joins the A chain through A2
    groups = topic_groups(rows, titles_of)
    assert sorted(sorted(r["id"] for r in g) for g in groups) == [["A0", "A1", "A2", "y"], ["x"]]


@pytest.mark.parametrize("seed", range(6))
def test_a_full_split_is_found_where_whole_groups_allow_one(seed):
    # 12 + 12 + 24 linked questions and sizes 12/12/24: record by record, a greedy loses rows (e.g. 12/10/24)
    rows = chain("A", 12) + chain("B", 12) + chain("C", 24)
    split = disjoint_split(rows, (12, 12, 24), random.Random(seed), titles_of)
    assert split.sizes == (12, 12, 24) and split.shortfall("hotpotqa", "train/val/test") is None
    assert_disjoint(split.parts)
    assert sorted(len({r["id"][0] for r in p}) for p in split.parts) == [1, 1, 1]   # one group per split


def _best_whole_group_total(groups, sizes):
    best = 0
    for assignment in itertools.product(range(len(sizes) + 1), repeat=len(groups)):   # split index or none
        fill = [0] * len(sizes)
        for g, where in zip(groups, assignment):
            if where < len(sizes):
                fill[where] += len(g)
        best = max(best, sum(min(f, s) for f, s in zip(fill, sizes)))
    return best


@pytest.mark.parametrize("trial", range(25))
def test_no_assignment_of_whole_groups_places_more_rows(trial):
    rng = random.Random(trial)
    groups = [hub(f"G{k}", rng.randint(1, 9)) for k in range(rng.randint(2, 6))]
    sizes = tuple(rng.randint(1, 10) for _ in range(3))
    split = disjoint_split([r for g in groups for r in g], sizes, random.Random(trial), titles_of)
    assert_disjoint(split.parts) and all(len(p) <= s for p, s in zip(split.parts, sizes))
    assert split.exhaustive and sum(split.sizes) == _best_whole_group_total(groups, sizes)


def test_a_short_split_says_title_conflicts_not_too_few_rows():
    rows = hub("P", 20) + hub("Q", 20) + hub("R", 8)           # 48 rows for 12/12/24, in three indivisible groups
    s = split_hotpotqa(rows, None, (12, 12, 24), seed=0)
    assert sum(s.sizes()) == _best_whole_group_total([hub("P", 20), hub("Q", 20), hub("R", 8)], (12, 12, 24))
    note = next(n for n in s.notes if "topic-disjointness placed" in n)
    assert "title conflicts: the 48 rows form 3 groups" in note and "largest 20 rows" in note
    assert "not enough rows" not in note and not any("rows are available" in n for n in s.notes)


def test_too_few_rows_is_said_as_such():
    rows = [q(i, [f"T{i}"]) for i in range(10)]
    split = disjoint_split(rows, (6, 6, 6), random.Random(0), titles_of)
    assert sum(split.sizes) == 10                               # every row placed: nothing conflicts
    note = split.shortfall("hotpotqa", "train/val/test")
    assert "not enough rows: 10 for the 18 wanted" in note and "title conflicts" not in note


def test_a_family_without_validation_rows_is_refused(tmp_path):
    rows = hub("P", 30) + hub("Q", 18)                          # two indivisible groups for three splits
    (tmp_path / "hotpotqa.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(SplitError, match=r"hotpotqa: the validation split would be empty") as e:
        load_family("hotpotqa", data_dir=tmp_path, sizes=(12, 12, 24))
    assert "title conflicts: the 48 rows form 2 groups" in str(e.value) and "--sizes hotpotqa=" in str(e.value)
    with pytest.raises(SplitError, match="train split would be empty"):     # scaled to nothing: too few rows
        load_family("hotpotqa", data_dir=tmp_path, sizes=(1, 1, 300))


def test_the_train_file_shortfall_says_why():
    dev = [q(i, [f"D{i}", "Shared" if i == 0 else f"E{i}"]) for i in range(10)]
    train = [q(100 + i, [f"R{i}", "Shared"]) for i in range(10)]
    s = split_hotpotqa(dev, train, (10, 5, 5), seed=0)          # all 10 dev rows go to val/test, "Shared" too
    assert len(s.train) == 0
    assert "hotpotqa: train wanted 10 but got 0: of the train file's 10 rows only 0 share no supporting title " \
           "with validation or test (the others would leak held-out topics into train)" in s.notes
