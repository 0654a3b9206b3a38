"""Every public parameter of AdaptiveGEPA and RoutedProgram is documented dspy-style (an `Args:` entry)."""

import inspect
import re

import pytest

from dspy_adaptive import AdaptiveGEPA, RoutedProgram, SandboxSettings
from dspy_adaptive.program.scoring import score_example


def _documented(obj) -> set[str]:
    doc = inspect.getdoc(obj) or ""
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    args = re.split(r"\n\S", args, maxsplit=1)[0]          # up to the next unindented section
    return set(re.findall(r"^\s{4}(\*{0,2}\w+):", args, re.M))


@pytest.mark.parametrize("obj, signature_of", [(AdaptiveGEPA, AdaptiveGEPA.__init__),
                                               (RoutedProgram, RoutedProgram.__init__),
                                               (AdaptiveGEPA.compile, AdaptiveGEPA.compile),
                                               (SandboxSettings, SandboxSettings),
                                               (score_example, score_example)])
def test_every_public_parameter_has_an_args_entry(obj, signature_of):
    params = {("**" + n if p.kind is p.VAR_KEYWORD else n)
              for n, p in inspect.signature(signature_of).parameters.items() if n != "self"}
    assert params - _documented(obj) == set()
    assert _documented(obj) - params == set()            # and nothing stale is documented
