"""Execution profiles (issue 15 item 2, paper Appendix B): fast/deep built from the actor, and the PROFILE a
specialist declares in its own source, read statically."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import dspy
import pytest

from dspy_adaptive import Library, RoutedProgram, Slot, profiles_from, route_of
from dspy_adaptive.program.profiles import declared_profile, effective_profile, model_family
from dspy_adaptive.testing import scripted_lm
from tests.core import toy

DEEP_SOURCE = 'PROFILE = "deep"\n' + toy.WRONG_SOURCE.replace('"nope"', 'self.p(question=question).answer') \
    .replace("super().__init__()", "super().__init__()\n        self.p = dspy.Predict(\"question -> answer\")")


def test_qwen3_profiles_use_the_chat_template_thinking_switch():
    fast, deep = profiles_from(dspy.LM("hosted_vllm/Qwen/Qwen3-8B", api_base="http://127.0.0.1:9/v1"))
    assert fast.kwargs["temperature"] == 0.3 and fast.kwargs["max_tokens"] == 4096
    assert fast.kwargs["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert deep.kwargs["temperature"] == 0.6 and deep.kwargs["max_tokens"] == 8192
    assert deep.kwargs["extra_body"] == {"chat_template_kwargs": {"enable_thinking": True}}
    assert fast.model == deep.model == "hosted_vllm/Qwen/Qwen3-8B"


def test_other_model_families_have_a_documented_mapping():
    p = profiles_from(dspy.LM("openai/o3-mini", temperature=1.0, max_tokens=16000))
    assert p.family == "openai_reasoning"
    assert p.fast.kwargs["reasoning_effort"] == "low" and p.deep.kwargs["reasoning_effort"] == "high"
    p = profiles_from(dspy.LM("openai/gpt-4.1", temperature=0.3))        # the paper's GPT-4.1 setting
    assert p.family == "other" and "extra_body" not in p.fast.kwargs
    assert (p.fast.kwargs["temperature"], p.fast.kwargs["max_tokens"]) == (0.3, 4096)
    assert (p.deep.kwargs["temperature"], p.deep.kwargs["max_tokens"]) == (0.3, 8192)
    assert model_family("ollama_chat/qwen3:8b") == "qwen3"


class _Recorder(BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Recorder.bodies.append(body)
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                 "choices": [{"index": 0, "finish_reason": "stop", "message": {
                     "role": "assistant", "content": "[[ ## answer ## ]]\n42\n\n[[ ## completed ## ]]"}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_the_thinking_switch_reaches_an_openai_compatible_server():
    """The request a vLLM server receives carries chat_template_kwargs.enable_thinking per profile."""
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        actor = dspy.LM("hosted_vllm/Qwen/Qwen3-8B", api_base=f"http://127.0.0.1:{server.server_port}/v1",
                        api_key="none", cache=False, num_retries=0)
        _Recorder.bodies.clear()
        for lm in profiles_from(actor):
            with dspy.context(lm=lm):
                assert dspy.Predict("question -> answer")(question="q").answer == "42"
    finally:
        server.shutdown()
    fast_body, deep_body = _Recorder.bodies
    assert fast_body["chat_template_kwargs"] == {"enable_thinking": False}
    assert deep_body["chat_template_kwargs"] == {"enable_thinking": True}
    assert (fast_body["temperature"], fast_body["max_tokens"]) == (0.3, 4096)
    assert (deep_body["temperature"], deep_body["max_tokens"]) == (0.6, 8192)


@pytest.mark.parametrize("source,expected", [
    ('PROFILE = "deep"\nclass A: pass\n', ("deep", None)),
    ("PROFILE = 'fast'\n", ("fast", None)),
    ("class A: pass\n", (None, None)),
    ("def f():\n    PROFILE = 'deep'\n", (None, None)),                      # not module level
])
def test_declared_profile_is_read_from_the_syntax_tree(source, expected):
    assert declared_profile(source) == expected


@pytest.mark.parametrize("source", [
    'PROFILE = "turbo"\n', 'PROFILE = "deep"\nPROFILE = "fast"\n', "PROFILE: str = 'deep'\n",
    "PROFILE = __import__('os').system('touch /tmp/should-not-exist-profile')\n", "PROFILE = X = 'deep'\n",
])
def test_invalid_declarations_are_problems_and_nothing_runs(source, tmp_path):
    profile, problem = declared_profile(source)
    assert profile is None and problem and "PROFILE" in problem
    import os
    assert not os.path.exists("/tmp/should-not-exist-profile")


def test_a_declared_profile_wins_and_a_rewrite_can_change_it():
    slot = Slot().activated("math", DEEP_SOURCE, "fast")
    assert slot.profile == "deep"                                  # the source's declaration wins
    rewritten = slot.with_program(DEEP_SOURCE.replace('PROFILE = "deep"', 'PROFILE = "fast"'))
    assert rewritten.profile == "fast"
    assert slot.with_program(toy.WRONG_SOURCE).profile == "deep"   # no declaration: keep the stored one
    assert effective_profile(DEEP_SOURCE, "fast") == "deep"


def test_routed_program_runs_a_specialist_on_its_declared_profile():
    calls = {"fast": 0, "deep": 0}

    def lm_for(name):
        def respond(call):
            if "slot" in call.output_fields:
                return {"slot": "1"}
            calls[name] += 1
            return {"answer": name}
        return scripted_lm(respond, model=f"scripted/{name}")

    fast, deep = lm_for("fast"), lm_for("deep")
    # stored profile says fast; the source says deep (as a library saved before a rewrite could)
    lib = Library.empty(2).with_slot(1, Slot(description="all", program_source=DEEP_SOURCE, active=True,
                                             profile="fast"))
    prog = RoutedProgram(dspy.Predict("question -> answer"), lib, fast_lm=fast, deep_lm=deep)
    try:
        pred = prog(question="hi")
        assert route_of(pred).executed == 1 and pred.answer == "deep" and calls["deep"] == 1
        bad = lib.with_slot(1, Slot(description="all", program_source=DEEP_SOURCE.replace('"deep"', '"warp"'),
                                    active=True, profile="fast"))
        pred = prog.with_library(bad)(question="hi")
        assert route_of(pred).executed == 0 and "profile" in route_of(pred).fallback_reason
    finally:
        prog.close()


def test_reflection_rejects_an_invalid_profile_declaration():
    from dspy_adaptive.data import make_rows
    from dspy_adaptive.reflection.propose import Reflector
    from dspy_adaptive.schema import RowResult

    rows = list(make_rows(toy.make_examples(1), "trainset"))
    results = [RowResult(r.id, 0.0, "wrong", {"answer": "x"}, 0, 0, None, None, ()) for r in rows]
    refl = toy.reflection_lm(program_source='PROFILE = "ultra"\n' + toy.ADD_SOURCE)
    edit = Reflector(refl, input_names=("question",), output_names=("answer",)).propose(Library.empty(2), rows,
                                                                                        results)
    assert edit.rejected and edit.failure == "sandbox_rejected" and "PROFILE" in edit.reason
