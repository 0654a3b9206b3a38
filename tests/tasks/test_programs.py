"""The seed P0 on every family with a scripted LM: models see the request and nothing else."""

import re

import dspy
import pytest

from benchmarks.data import load_mixture
from dspy_adaptive.tasks.metrics import MixtureMetric
from dspy_adaptive.tasks.programs import SeedProgram, make_external_llm_tool, make_seed_program
from dspy_adaptive.testing import scripted_lm


def hidden_values(ex):
    """Label and gold values that must never reach a model."""
    vals = [ex.id, ex.source_id, ex.family]
    if ex.subtask:
        vals.append(ex.subtask)
    if ex.family == "hotpotqa":
        vals += [ex.answer, *ex.supporting_titles]
    elif ex.family == "aime":
        vals += [str(ex.answer), ex.answer_raw] + ([ex.solution[:80]] if ex.solution else [])
    elif ex.family == "pupa":
        vals += [ex.target_response[:80], ex.redacted_query[:80], *ex.pii_units]
    else:
        vals += [*ex.instruction_id_list, ex.citation]
    return [v for v in vals if v]


@pytest.mark.parametrize("cot", [False, True])
def test_seed_prompts_carry_no_labels_or_gold(shared_data, cot):
    mix = load_mixture(data_dir=shared_data)
    lm = scripted_lm(lambda call: {"reasoning": "thinking", "response": "PLAIN ANSWER"})
    program = make_seed_program(chain_of_thought=cot)
    assert isinstance(program, dspy.Module) and len(program.predictors()) == 1
    examples = [e for s in mix.families.values() for e in s.train[:3]]
    with dspy.context(lm=lm):
        preds = [program(**e.inputs()) for e in examples]
    assert all(p.response == "PLAIN ANSWER" for p in preds)
    assert len(lm.scripted.calls) == len(examples)
    for ex, call in zip(examples, lm.scripted.calls):
        prompt = call.prompt
        assert ex.request.strip() in prompt
        rest = prompt.replace(ex.request.strip(), " ")       # what the model saw besides the request itself
        for value in hidden_values(ex):
            assert not re.search(r"(?<!\w)" + re.escape(str(value)) + r"(?!\w)", rest), (ex.family, value)
        for name in ("family", "subtask", "answer", "supporting_titles", "target_response", "pii_units",
                     "instruction_id_list", "source_id"):
            assert f"`{name}`" not in prompt and f"## {name} ##" not in prompt
        assert call.output_fields == (("reasoning", "response") if cot else ("response",))


def test_seed_output_scores_through_the_mixture_metric(shared_data):
    mix = load_mixture(data_dir=shared_data)
    ex = mix.family("aime").train[0]
    lm = scripted_lm(lambda call: {"response": f"The answer is {ex.answer}."})
    with dspy.context(lm=lm):
        pred = SeedProgram()(**ex.inputs())
    assert MixtureMetric()(ex, pred).score == 1.0


def test_external_llm_tool():
    untrusted = scripted_lm(lambda call: "EXTERNAL REPLY")
    ask = make_external_llm_tool(untrusted)
    assert ask.__name__ == "ask_external_llm"
    assert ask("Write a cover letter for a nurse.") == "EXTERNAL REPLY"
    assert ask("  ") == "" and len(untrusted.scripted.calls) == 1
    with pytest.raises(ValueError):
        make_external_llm_tool(None)
