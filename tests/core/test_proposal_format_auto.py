"""proposal_format="auto" (the default, issue 28) is chosen from the reflection LM: structured for a GGUF model in
this process, code switching to structured after rejections for any other."""

from __future__ import annotations

import dspy

from dspy_adaptive import AdaptiveGEPA
from dspy_adaptive.lm.local import LlamaCppEngine
from dspy_adaptive.reflection.settings import ReflectionSettings
from tests.core import toy


def in_process_lm():
    return dspy.LM("local/tiny", engine=LlamaCppEngine(llama=object()), cache=False, num_retries=0)


def test_auto_is_the_default_and_resolves_from_the_reflection_lm():
    assert AdaptiveGEPA(toy.metric, reflection_lm=toy.reflection_lm(), max_metric_calls=10).config.reflection \
        .proposal_format == "auto"
    assert ReflectionSettings(lm=in_process_lm()).resolved_format == "structured"
    assert ReflectionSettings(lm=toy.reflection_lm()).resolved_format == "auto"        # code, then structured
    assert ReflectionSettings(lm=dspy.LM("hosted_vllm/Qwen/Qwen3-8B")).resolved_format == "auto"
    assert ReflectionSettings(lm=in_process_lm(), proposal_format="code").resolved_format == "code"


def test_the_reflector_gets_the_resolved_format():
    reflector = ReflectionSettings(lm=in_process_lm()).reflector(input_names=("question",), tools={})
    assert reflector.proposal_format == "structured"


def test_with_tools_the_tool_using_shape_is_listed_first():
    from dspy_adaptive.reflection.structured import MODULE_KINDS, kinds_for, signatures_for

    assert kinds_for(()) == MODULE_KINDS
    assert kinds_for(("search",))[0] == "retrieve_then_answer" and set(kinds_for(("search",))) == set(MODULE_KINDS)
    activate, rewrite = signatures_for(("search",))
    for sig, field in ((activate, "activation"), (rewrite, "shape")):
        schema = sig.output_fields[field].annotation.model_json_schema()
        assert schema["properties"]["kind"]["enum"][0] == "retrieve_then_answer"
