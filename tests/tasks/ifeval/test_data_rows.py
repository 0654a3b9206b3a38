"""Every row of both data files is checkable without error."""

import json

import pytest

from dspy_adaptive.tasks.ifeval import evaluate_instructions, livebench_if_score


def _rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("name,expected", [("livebench_if.jsonl", 400), ("ifeval.jsonl", 80)])
def test_all_rows_checkable(shared_data, name, expected):
    rows = _rows(shared_data / name)
    assert len(rows) == expected
    for row in rows:
        prompt = row["turns"][0] if "turns" in row else row["prompt"]
        ids, kwargs = row["instruction_id_list"], row["kwargs"]
        for response in ("A dummy response.", "", prompt):
            score, results = livebench_if_score(response, ids, kwargs, prompt)
            assert 0.0 <= score <= 1.0
            assert [r.instruction_id for r in results] == ids


def test_repeat_prompt_rows_accept_their_own_prompt(shared_data):
    rows = _rows(shared_data / "livebench_if.jsonl") + _rows(shared_data / "ifeval.jsonl")
    n = 0
    for row in rows:
        if "combination:repeat_prompt" not in row["instruction_id_list"]:
            continue
        i = row["instruction_id_list"].index("combination:repeat_prompt")
        prompt = row["turns"][0] if "turns" in row else row["prompt"]
        [r] = evaluate_instructions(prompt + "\nMy answer.", [row["instruction_id_list"][i]], [row["kwargs"][i]],
                                    prompt)
        assert r.followed, r.detail
        n += 1
    assert n == 26
