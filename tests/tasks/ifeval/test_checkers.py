"""Every instruction id in the data: one crafted compliant and one crafted non-compliant response."""

import dataclasses
import json

import pytest

from dspy_adaptive.tasks.ifeval import (
    INSTRUCTION_IDS,
    InstructionArgumentError,
    UnknownInstructionError,
    evaluate_instructions,
    text_util,
)

# (instruction_id, kwargs, compliant response, non-compliant response[, prompt])
CASES = [
    ("keywords:existence", {"keywords": ["sun", "media"]},
     "The SUN rose over the social media tower.", "The moon rose over the tower."),
    ("keywords:frequency", {"keyword": "war", "frequency": 2, "relation": "at least"},
     "War is loud; war is long.", "War is loud."),
    ("keywords:frequency", {"keyword": "war", "frequency": 2, "relation": "less than"},
     "War is loud.", "War is loud; war is long."),
    ("keywords:forbidden_words", {"forbidden_words": ["cat", "dog"]},
     "The category of hotdogs is broad.", "A Cat sat on the mat."),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 3, "let_relation": "at least"},
     "Zizzy buzz.", "A zebra."),
    ("keywords:letter_frequency", {"letter": "#", "let_frequency": 2, "let_relation": "at least"},
     "fun day #sun #beach", "fun day #sun"),
    ("language:response_language", {"language": "fr"},
     "Bonjour tout le monde, je suis très heureux de vous voir aujourd'hui dans cette belle ville.",
     "Hello everyone, I am very happy to see you today in this beautiful city."),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"},
     "Dr. Smith went home. He was tired.", "One is here. Two is there. Three is everywhere."),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "at least"},
     "One is here. Two is there! Three is everywhere?", "Dr. Smith went home. He was tired."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2},
     "First paragraph.\n***\nSecond paragraph.", "First paragraph.\n***\n***\nSecond paragraph."),
    ("length_constraints:number_words", {"num_words": 5, "relation": "at least"},
     "one two three four five", "one two three"),
    ("length_constraints:number_words", {"num_words": 5, "relation": "less than"},
     "one two three", "one, two-three four five"),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "hand"},
     "The first paragraph.\n\n\"Hand, in hand, we went.\"", "The first paragraph.\n\nFoot first we went."),
    ("length_constraints:nth_paragraph_first_word",
     {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "hand"},
     "Hand in hand.\n\nThe second one.", "Hand in hand.\n\nThe second one.\n\nA third one."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2},
     "Dear [name], we will meet at [address].", "Dear [name], we will meet soon."),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"},
     "Body text.\n\nP.P.S. One more thing.", "Body text.\n\nP.S. One more thing."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."},
     "Body text.\np.s. One more thing.", "Body text.\nPS one more thing."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2},
     "Intro\n* first\n* second", "Intro\n* first\n* second\n- third"),
    ("detectable_format:constrained_response", {},
     "Having thought about it: My answer is maybe.", "Maybe."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2},
     "This is *one part* and **another part**.", "This is *one part* and ** ** nothing."),
    ("detectable_format:multiple_sections", {"section_spliter": "Section", "num_sections": 2},
     "Section 1\nAlpha.\nSection 2\nBeta.", "Section 1\nAlpha and beta."),
    ("detectable_format:json_format", {},
     "```json\n{\"answer\": [1, 2]}\n```", "answer: 1, 2"),
    ("detectable_format:title", {},
     "<<A Poem of Joy>>\nRoses are red.", "<< >>\nRoses are red."),
    ("combination:two_responses", {},
     "Answer one.\n******\nAnswer two.", "Answer one.\n******\nAnswer one."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem about the sea."},
     "write a poem about the sea. The sea is wide and blue.", "Sure! Write a poem about the sea."),
    ("combination:repeat_prompt", {},
     "Summarize the text. Here is the summary.", "Here is the summary.",
     "Summarize the text. First repeat the request word for word without change, then give your answer"),
    ("startend:end_checker", {"end_phrase": "Any other questions?"},
     "That is all. any other questions?\"", "Any other questions? Goodbye."),
    ("startend:quotation", {},
     "  \"Everything is quoted here.\"  ", "Only \"part\" is quoted."),
    ("change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "at least"},
     "I really LOVE NASA missions.", "i really love nasa MISSIONS."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "less than"},
     "We went to NASA today.", "DON'T do that."),  # Treebank splits DON'T into DO + N'T
    ("change_case:english_capital", {},
     "THIS IS AN ENGLISH SENTENCE WRITTEN ENTIRELY IN CAPITAL LETTERS.", "This Is Not All Capitals."),
    ("change_case:english_lowercase", {},
     "this is an english sentence written entirely in lowercase letters.", "this is mostly lowercase, except Here."),
    ("punctuation:no_comma", {}, "No commas in here at all.", "Yes, there is one."),
]


def _case_id(case):
    return f"{case[0]}-{json.dumps(case[1], sort_keys=True)}"


def _check(case, response):
    iid, kwargs = case[0], case[1]
    prompt = case[4] if len(case) > 4 else "a prompt"
    [result] = evaluate_instructions(response, [iid], [kwargs], prompt)
    assert result.instruction_id == iid
    assert isinstance(result.detail, str) and result.detail
    return result


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_compliant_response_is_followed(case):
    result = _check(case, case[2])
    assert result.followed, result.detail


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_non_compliant_response_is_not_followed(case):
    result = _check(case, case[3])
    assert not result.followed, result.detail


def _data_ids(shared_data):
    ids = set()
    for name in ("livebench_if.jsonl", "ifeval.jsonl"):
        with open(shared_data / name) as f:
            for line in f:
                ids.update(json.loads(line)["instruction_id_list"])
    return ids


def test_every_data_instruction_id_has_cases_and_a_checker(shared_data):
    data_ids = _data_ids(shared_data)
    assert data_ids <= set(INSTRUCTION_IDS)
    assert data_ids <= {case[0] for case in CASES}
    assert {case[0] for case in CASES} == set(INSTRUCTION_IDS)


def test_detail_is_human_readable():
    [r] = evaluate_instructions("too short", ["length_constraints:number_words"],
                                [{"num_words": 300, "relation": "at least"}], "p")
    assert r.detail == "needs at least 300 words, found 2"


def test_empty_response_follows_nothing():
    results = evaluate_instructions("   ", ["punctuation:no_comma", "keywords:forbidden_words"],
                                    [{}, {"forbidden_words": ["x"]}], "p")
    assert [r.followed for r in results] == [False, False]


def test_none_kwargs_are_dropped():
    kwargs = {"num_words": 2, "relation": "at least", "keywords": None, "end_phrase": None}
    [r] = evaluate_instructions("two words", ["length_constraints:number_words"], [kwargs], "p")
    assert r.followed


def test_unknown_id_names_the_id():
    with pytest.raises(UnknownInstructionError, match="keywords:no_such_thing"):
        evaluate_instructions("x", ["keywords:no_such_thing"], [{}], "p")


def test_bad_kwargs_raise():
    with pytest.raises(InstructionArgumentError, match="relation"):
        evaluate_instructions("x", ["length_constraints:number_words"], [{"num_words": 3, "relation": "about"}], "p")
    with pytest.raises(InstructionArgumentError, match="missing"):
        evaluate_instructions("x", ["length_constraints:number_words"], [{"relation": "at least"}], "p")
    with pytest.raises(InstructionArgumentError, match="unexpected"):
        evaluate_instructions("x", ["punctuation:no_comma"], [{"num_words": 3}], "p")
    with pytest.raises(ValueError):
        evaluate_instructions("x", ["punctuation:no_comma"], [], "p")


def test_result_is_frozen():
    [r] = evaluate_instructions("x", ["punctuation:no_comma"], [{}], "p")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.followed = False


def test_punkt_sentences_and_treebank_words():
    assert text_util.count_sentences("Dr. Smith went home. He was tired.") == 2
    assert text_util.count_sentences("") == 0
    assert text_util.word_tokenize("DON'T stop.") == ["DO", "N'T", "stop", "."]
    assert text_util.count_words("well-known, isn't it") == 5
