"""Bad input is refused before the first LM call, with a message that names the problem and the fix."""

from __future__ import annotations

import dspy
import pytest

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.data import InputError
from dspy_adaptive.testing import scripted_lm
from tests.core import toy


def never_called(call):
    raise AssertionError("no LM call may happen before input validation")


LM = scripted_lm(never_called)


def good(**kw):
    params = dict(reflection_lm=LM, max_metric_calls=100, progress=False)
    params.update(kw)
    return AdaptiveGEPA(toy.metric, **params)


def compile_with(train=None, val=None, **kw):
    train = toy.make_examples(3) if train is None else train
    val = toy.make_examples(3, offset=50) if val is None else val
    with dspy.context(lm=LM):
        return good(**kw).compile(dspy.Predict("question -> answer"), trainset=train, valset=val)


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_metric_calls=None), "exactly one of auto, max_full_evals, max_metric_calls"),
    (dict(auto="light"), "exactly one"),
    (dict(max_metric_calls=0), "positive integer"),
    (dict(max_metric_calls=-5), "positive integer"),
    (dict(max_metric_calls=None, auto="extreme"), "auto must be one of"),
    (dict(reflection_lm=None), "reflection_lm is required"),
    (dict(max_specialists=0), "max_specialists"),
    (dict(candidate_selection_strategy="best"), "candidate_selection_strategy must be one of"),
    (dict(alignment="greedy"), "alignment must be one of"),
    (dict(num_threads=0), "num_threads"),
    (dict(reflection_minibatch_size=0), "reflection_minibatch_size"),
    (dict(batch_sampler="balanced"), "batch_sampler must be a callable"),
    (dict(max_concurrent_proposals=0), "max_concurrent_proposals"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(InputError, match=match):
        good(**kwargs)


def test_metric_with_wrong_arity():
    with pytest.raises(InputError, match="five arguments"):
        AdaptiveGEPA(lambda gold, pred: 1.0, reflection_lm=LM, max_metric_calls=10)


@pytest.mark.parametrize("metric, says", [
    (lambda x: 1.0, "yours takes too few: only 1 positional argument (x)"),
    (lambda gold, pred: 1.0, "yours takes too few: only 2 positional arguments (gold, pred)"),
    (lambda a, b, c, d, e, f: 1.0, "yours requires more (missing a required argument: 'f')"),
])
def test_a_metric_signature_error_says_what_is_wrong(metric, says):
    with pytest.raises(InputError) as err:
        AdaptiveGEPA(metric, reflection_lm=LM, max_metric_calls=10)
    assert says in str(err.value) and "too many" not in str(err.value)


def ex(**kw):
    return dspy.Example(**kw)


@pytest.mark.parametrize("train, val, match", [
    ([], None, "trainset is empty"),
    (None, [], "valset is empty"),
    ("not a list", None, "must be a list"),
    ([{"question": "q"}], None, "not a dspy.Example"),
    ([ex(question="q", answer="a")], None, "no input fields"),
    ([ex(question="q", answer="a").with_inputs("question"), ex(query="q", answer="a").with_inputs("query")],
     None, "mixes input keys"),
    ([ex(id="1", question="q", answer="a").with_inputs("question"),
      ex(id="1", question="r", answer="b").with_inputs("question")], None, "duplicate example ids"),
    (None, [ex(id="v", context="c", answer="a").with_inputs("context")], "differ from valset inputs"),
])
def test_bad_datasets(train, val, match):
    if train is None:
        train = toy.make_examples(2)
    with pytest.raises(InputError, match=match):
        compile_with(train=train, val=val if val is not None else toy.make_examples(2, offset=10))


def test_none_trainset():
    with pytest.raises(InputError, match="trainset is None"):
        with dspy.context(lm=LM):
            good().compile(dspy.Predict("question -> answer"), trainset=None, valset=toy.make_examples(2))


def test_budget_smaller_than_one_validation_pass():
    with pytest.raises(InputError, match="does not exceed one validation pass"):
        compile_with(max_metric_calls=6)


def test_unwritable_log_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="not writable"):
        compile_with(log_dir=str(blocker / "sub"))


def test_student_must_be_a_module():
    with pytest.raises(InputError, match="dspy.Module"):
        with dspy.context(lm=LM):
            good().compile(lambda question: question, trainset=toy.make_examples(2), valset=toy.make_examples(2))
