"""The distilled router's model: what scikit-learn computes, as data; refusing malformed or tampered files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.model_selection import StratifiedKFold, cross_val_predict

from dspy_adaptive.distill import DistilledRouter, DistilledRouterError, DistillError, DistillSettings
from dspy_adaptive.distill.model import Binding
from dspy_adaptive.distill.train import (
    HeldOut,
    candidate_pipeline,
    choose_threshold,
    extract,
    fit_temperature,
    held_out,
    train_router,
)
from tests.distill import common

BINDING = Binding("a" * 64, "b" * 64, ("question",))
SETTINGS = DistillSettings(folds=3, seed=1)


def labelled(classes=(1, 2, 0)):
    slot = {"add": 1, "reverse": 2, "upper": 0}
    exs = common.requests(12)
    texts = [e.question for e in exs]
    labels = np.asarray([slot[t.split(":")[0]] for t in texts])
    keep = np.isin(labels, classes)
    return [t for t, k in zip(texts, keep) if k], labels[keep]


@pytest.mark.filterwarnings("ignore:k=100 is greater")
@pytest.mark.parametrize("name", ["tfidf-word", "binary-word", "binary-char"])
@pytest.mark.parametrize("classes", [(1, 2, 0), (1, 0)])
def test_probabilities_are_calibrated_classifier_cvs(name, classes):
    """The extracted data reproduce CalibratedClassifierCV(method="temperature", ensemble=False) with the same folds,
    to float precision, for two and three slots; held_out's temperature is the same fit on the same out-of-fold
    scores with Platt's smoothed targets (unsmoothed, it is scikit-learn's)."""
    texts, y = labelled(classes)
    x = np.asarray(texts, dtype=object)
    cv = StratifiedKFold(SETTINGS.folds, shuffle=True, random_state=SETTINGS.seed)
    ref = CalibratedClassifierCV(candidate_pipeline(name, SETTINGS), method="temperature", ensemble=False, cv=cv)
    ref.fit(x, y)
    held = held_out(name, texts, y, np.zeros(len(y), dtype=bool), SETTINGS)
    cv_logits = cross_val_predict(candidate_pipeline(name, SETTINGS), x, y, cv=cv, method="decision_function")
    cv_logits = np.column_stack([-cv_logits, cv_logits]) if cv_logits.ndim == 1 else cv_logits
    idx = np.searchsorted(np.unique(y), y)
    sklearn_beta = float(ref.calibrated_classifiers_[0].calibrators[0].beta_)
    assert fit_temperature(cv_logits, idx, smoothing=False) == pytest.approx(sklearn_beta, rel=1e-4)
    assert held.beta == pytest.approx(fit_temperature(cv_logits, idx), rel=1e-9)   # the same folds, smoothed
    assert held.beta < sklearn_beta or sklearn_beta == pytest.approx(np.exp(10.0), rel=1e-3)
    ours = extract(name, ref.calibrated_classifiers_[0].estimator, BINDING, sklearn_beta)
    probe = texts + ["add: 100 200", "reverse: something", "what is this?", ""]
    np.testing.assert_allclose(ours.predict_proba(probe), ref.predict_proba(np.asarray(probe, dtype=object)),
                               rtol=1e-5, atol=1e-9)
    assert list(ours.classes) == sorted(classes)


def test_round_trip_is_exact_and_data_only(tmp_path):
    texts, y = labelled()
    d = train_router(texts, y, BINDING, SETTINGS)
    text = d.to_json()
    back = DistilledRouter.from_json(text)
    probe = ["add: 5 6", "reverse: lamp", "upper: x please"]
    np.testing.assert_array_equal(back.predict_proba(probe), d.predict_proba(probe))
    assert back.threshold == d.threshold and back.classes == d.classes
    assert [dec.slot for dec in back.decide_texts(probe)] == [1, 2, 0]
    data = json.loads(text)
    assert data["format"] == "dspy_adaptive.distilled_router" and isinstance(data["coef"][0][0], float)


def _tamper(d: DistilledRouter, change, fix_checksum: bool = False) -> dict:
    from dspy_adaptive.distill.model import _checksum

    data = json.loads(d.to_json())
    change(data)
    if fix_checksum:
        data["checksum"] = _checksum({k: v for k, v in data.items() if k != "checksum"})
    return data


@pytest.mark.parametrize("change, fix, words", [
    (lambda d: d["coef"][0].__setitem__(0, d["coef"][0][0] + 1.0), False, "checksum does not match"),
    (lambda d: d.__setitem__("threshold", 0.0), False, "checksum does not match"),
    (lambda d: d["features"].__setitem__("analyzer", "os.system"), True, "unknown analyzer"),
    (lambda d: d["features"].__setitem__("kind", "pickle"), True, "unknown features kind"),
    (lambda d: d["coef"].pop(), True, "coef must have"),
    (lambda d: d["coef"][0].pop(), True, "coef[0] must be"),
    (lambda d: d["coef"][0].__setitem__(0, "1e3"), True, "other than numbers"),
    (lambda d: d.__setitem__("beta", -1.0), True, "beta"),
    (lambda d: d.__setitem__("threshold", 1.5), True, "threshold"),
    (lambda d: d.__setitem__("classes", [1, 1, 2]), True, "distinct slot numbers"),
    (lambda d: d["binding"].__setitem__("library_hash", "nothex"), True, "sha256"),
    (lambda d: d.__setitem__("version", 99), True, "version"),
    (lambda d: d.__setitem__("extra", 1), True, "unexpected keys"),
    (lambda d: d.__setitem__("format", "joblib"), True, "format"),
])
def test_malformed_or_tampered_is_refused_with_the_reason(change, fix, words):
    texts, y = labelled()
    d = train_router(texts, y, BINDING, SETTINGS)
    with pytest.raises(DistilledRouterError, match="refusing the distilled router") as err:
        DistilledRouter.from_dict(_tamper(d, change, fix))
    assert words in str(err.value)


def test_not_json_or_not_an_object_is_refused():
    with pytest.raises(DistilledRouterError, match="must be JSON"):
        DistilledRouter.from_json("\x80not json{")
    with pytest.raises(DistilledRouterError, match="expected a JSON object"):
        DistilledRouter.from_dict(["a", "list"])
    with pytest.raises(DistilledRouterError, match="NaN|not plain JSON|not finite"):
        DistilledRouter.from_json(json.dumps({**json.loads(train_router(*labelled(), BINDING, SETTINGS).to_json()),
                                              "beta": float("nan")}))


def test_choose_threshold_is_the_lowest_confidence_meeting_the_target():
    held = HeldOut("x", predicted=np.array([1, 1, 0, 0, 2]), confidence=np.array([0.99, 0.95, 0.9, 0.6, 0.55]),
                   labels=np.array([1, 1, 0, 2, 0]))
    assert choose_threshold(held, target=1.0, floor=0.5) == 0.9           # 0.6 and 0.55 are wrong
    assert choose_threshold(held, target=0.75, floor=0.5) == 0.6          # 3 of 4 right at >= 0.6
    assert choose_threshold(held, target=0.75, floor=0.92) == 0.92          # the floor itself qualifies
    wrong = HeldOut("x", np.array([1]), np.array([0.99]), np.array([2]))
    assert choose_threshold(wrong, target=0.9, floor=0.5) is None
    served = held.served(0.9)
    assert served["agreement"] == 1.0 and served["share_lm_router"] == pytest.approx(0.4)


def test_a_slot_with_too_few_requests_is_left_out_and_counted_against_agreement():
    texts, y = labelled((1, 0))
    texts, y = texts + ["reverse: abc", "reverse: xyz"], np.append(y, [2, 2])
    d = train_router(texts, y, BINDING, SETTINGS)
    assert d.classes == (0, 1) and d.training["rare_slots"] == {"2": 2}
    assert d.training["heldout"]["classifier_agreement"] < 1.0          # the two slot-2 requests are misses


def test_nothing_to_learn_raises_distill_error():
    with pytest.raises(DistillError, match="fewer than two slots"):
        train_router(["add: 1 2"] * 6 + ["upper: a"], [1] * 6 + [0], BINDING, SETTINGS)


def test_no_threshold_meeting_the_target_raises_distill_error():
    texts = [f"same request {i % 2}" for i in range(24)]
    labels = np.array([i % 3 == 0 for i in range(24)], dtype=int)      # not a function of the text
    with pytest.raises(DistillError, match="no confidence threshold"):
        train_router(texts, labels, BINDING, DistillSettings(folds=3, target_agreement=0.99, min_threshold=0.9))


def test_smoothed_temperature_stays_finite_when_held_out_scores_separate_everything():
    logits = np.array([[4.0, -4.0], [3.0, -3.0], [-5.0, 5.0], [-2.0, 2.0]])
    labels = np.array([0, 0, 1, 1])
    from dspy_adaptive.distill.model import softmax_rows
    raw = fit_temperature(logits, labels, smoothing=False)
    assert np.all(softmax_rows(raw * logits).max(axis=1) == 1.0)     # unsmoothed: certain of everything
    beta = fit_temperature(logits, labels)
    assert 0.1 < beta < raw
    top = softmax_rows(beta * logits).max(axis=1)
    assert top.max() < 1.0 and len(set(np.round(top, 9))) == 4     # confidences still tell requests apart
