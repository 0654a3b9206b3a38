"""LlamaCppEngine logic with an injected fake llama (no llama-cpp-python needed), and make_lm."""

import json
import threading
import time

import dspy
import pytest

from dspy_adaptive.lm import LlamaCppEngine, llama_response_format, local_lm, make_lm, parse_spec
from dspy_adaptive.lm import local as local_mod


class FakeLlama:
    """Stands in for llama_cpp.Llama: records kwargs, answers OpenAI-style, detects overlap."""

    def __init__(self, reply=None, latency=0.0):
        self.reply = reply or (lambda kw: '{"answer": "Paris"}' if "response_format" in kw
                               else "[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]")
        self.latency = latency
        self.calls = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self.closed = False

    def create_chat_completion(self, **kw):
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.calls.append(kw)
        try:
            if self.latency:
                time.sleep(self.latency)
            text = self.reply(kw)
            n_in = sum(len(m["content"].split()) for m in kw["messages"])
            n_out = min(len(text.split()), kw["max_tokens"])
            return {"id": "cmpl-1", "object": "chat.completion", "model": "fake",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "length" if n_out >= kw["max_tokens"] else "stop"}],
                    "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}}
        finally:
            with self._lock:
                self.active -= 1

    def close(self):
        self.closed = True


def fake_lm(fake=None, **kw):
    fake = fake if fake is not None else FakeLlama()
    return local_lm(llama=fake, **kw), fake


def test_predict_through_engine_converts_messages_and_counts_usage():
    lm, fake = fake_lm(max_tokens=77, temperature=0.0)
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter(), track_usage=True):
        pred = dspy.Predict("question -> answer")(question="Capital of France?")
    assert pred.answer == "Paris"
    kw = fake.calls[0]
    roles = [m["role"] for m in kw["messages"]]
    assert roles[0] == "system" and roles[-1] == "user"
    assert "Capital of France?" in kw["messages"][-1]["content"]
    assert kw["max_tokens"] == 77 and kw["temperature"] == 0.0
    assert "response_format" not in kw
    assert "[[ ## completed ## ]]" in kw["stop"]  # ChatAdapter prompts stop at the marker
    usage = pred.get_lm_usage()[lm.model]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert lm.engine.usage_totals["prompt_tokens"] == usage["prompt_tokens"]


def test_json_adapter_sends_schema_as_llama_grammar():
    lm, fake = fake_lm(fake=FakeLlama(reply=lambda kw: json.dumps({"reasoning": "r", "answer": "4"})))
    assert lm.supports_response_schema and "response_format" in lm.supported_params
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        pred = dspy.ChainOfThought("question -> answer")(question="2+2?")
    assert pred.answer == "4"
    fmt = fake.calls[0]["response_format"]
    assert fmt["type"] == "json_object"
    assert set(fmt["schema"]["properties"]) == {"reasoning", "answer"}
    assert set(fmt["schema"]["required"]) == {"reasoning", "answer"}
    assert "stop" not in fake.calls[0]


def test_chat_adapter_falls_back_to_json_grammar_when_model_ignores_markers():
    # A tiny model ignores the [[ ## field ## ]] format; DSPy retries with JSON, which the grammar fixes.
    lm, fake = fake_lm(fake=FakeLlama(reply=lambda kw: '{"answer": "Paris"}' if "response_format" in kw
                                      else "I think it is Paris, a lovely city."))
    with dspy.context(lm=lm):
        pred = dspy.Predict("question -> answer")(question="Capital of France?")
    assert pred.answer == "Paris"
    assert len(fake.calls) == 2 and "response_format" in fake.calls[1]


@pytest.mark.parametrize("given, expected", [
    (None, None),
    ({"type": "text"}, None),
    ({"type": "json_object"}, {"type": "json_object"}),
    ({"type": "json_schema", "schema": {"type": "object"}, "name": "X", "strict": True},
     {"type": "json_object", "schema": {"type": "object"}}),
    ({"type": "json_schema", "json_schema": {"name": "X", "schema": {"type": "object"}}},
     {"type": "json_object", "schema": {"type": "object"}}),
])
def test_response_format_mapping(given, expected):
    assert llama_response_format(given) == expected


def test_response_format_pydantic_and_unknown():
    import pydantic

    class Out(pydantic.BaseModel):
        answer: str

    assert llama_response_format(Out)["schema"]["properties"]["answer"]["type"] == "string"
    with pytest.raises(dspy.lm15.UnsupportedFeatureError):
        llama_response_format({"type": "xml"})


def test_max_tokens_and_temperature_per_call_and_truncation():
    lm, fake = fake_lm(fake=FakeLlama(reply=lambda kw: "word " * 50), max_tokens=10, temperature=0.0)
    out = lm("hi")
    assert fake.calls[-1]["max_tokens"] == 10
    assert lm.history[-1]["usage"]["completion_tokens"] == 10  # finish_reason=length from the fake
    lm("hi", max_tokens=3, temperature=0.9)
    assert fake.calls[-1]["max_tokens"] == 3 and fake.calls[-1]["temperature"] == 0.9
    assert out and isinstance(out[0], str)


def test_max_tokens_capped_at_context_size_and_rejects_nonpositive():
    engine = LlamaCppEngine(llama=FakeLlama(), n_ctx=64, max_tokens=1000)
    lm = dspy.LM("local/x", engine=engine, cache=False, num_retries=0)
    lm("hi")
    assert engine._pool.get().calls[-1]["max_tokens"] == 64


def test_concurrent_calls_are_serialised_on_one_instance():
    fake = FakeLlama(latency=0.02)
    lm, _ = fake_lm(fake=fake)
    errors = []

    def worker(i):
        try:
            lm(f"q{i}")
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert len(fake.calls) == 8 and fake.max_active == 1
    assert lm.engine.calls == 8


def test_pool_of_instances_runs_in_parallel_but_never_shares_one():
    fakes = [FakeLlama(latency=0.05), FakeLlama(latency=0.05)]
    engine = LlamaCppEngine(llama=fakes)
    lm = dspy.LM("local/pool", engine=engine, cache=False, num_retries=0)
    threads = [threading.Thread(target=lm, args=(f"x{i}",)) for i in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(f.max_active <= 1 for f in fakes)  # one call per instance at a time
    assert sum(len(f.calls) for f in fakes) == 6
    assert all(f.calls for f in fakes)  # ...but both instances did work


def test_lazy_factory_builds_up_to_n_instances():
    built = []

    def factory():
        built.append(FakeLlama(latency=0.02))
        return built[-1]

    engine = LlamaCppEngine.__new__(LlamaCppEngine)
    LlamaCppEngine.__init__(engine, llama=[], n_ctx=128)  # injected empty pool, then attach a factory
    engine.n_instances, engine._factory = 2, factory
    lm = dspy.LM("local/lazy", engine=engine, cache=False, num_retries=0)
    threads = [threading.Thread(target=lm, args=(str(i),))
               for i in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert 1 <= len(built) <= 2
    assert sum(len(f.calls) for f in built) == 6


def test_context_overflow_maps_to_context_length_error():
    class Overflow(FakeLlama):
        def create_chat_completion(self, **kw):
            raise ValueError("Requested tokens (5000) exceed context window of 4096")

    engine = LlamaCppEngine(llama=Overflow())
    lm = dspy.LM("local/x", engine=engine, cache=False, num_retries=0)
    with pytest.raises(Exception) as info:
        lm("hi")
    assert "context" in str(info.value).lower()
    # the instance went back to the pool despite the error
    assert engine._pool.qsize() == 1


def test_non_text_roles_rejected():
    from dspy.lm15 import Config, Message, Request, TextPart

    from dspy_adaptive.lm import to_chat_messages

    req = Request(model="local/x", messages=(Message.user([TextPart("hi")]),), system="sys", config=Config())
    assert to_chat_messages(req) == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]


def test_stream_and_close():
    fake = FakeLlama()
    engine = LlamaCppEngine(llama=fake)
    from dspy.lm15 import Config, Message, Request, TextPart

    req = Request(model="local/x", messages=(Message.user([TextPart("hi")]),), config=Config(max_tokens=5))
    events = list(engine.stream(req))
    assert events[0].type == "start" and events[-1].type == "end"
    engine.close()
    assert fake.closed
    with pytest.raises(dspy.lm15.ConfigurationError):
        engine.complete(req)


# ------------------------------------------------------------------ specs, paths

@pytest.mark.parametrize("spec, expected", [
    ("local", ("local", None)),
    ("local:", ("local", None)),
    ("local:/models/m.gguf", ("local", "/models/m.gguf")),
    ("  local:/a b/m.gguf ", ("local", "/a b/m.gguf")),
    ("/models/qwen.gguf", ("local", "/models/qwen.gguf")),
    ("openai/gpt-4.1-mini", ("litellm", "openai/gpt-4.1-mini")),
    ("ollama_chat/qwen2.5:0.5b", ("litellm", "ollama_chat/qwen2.5:0.5b")),
    ("hosted_vllm/Qwen/Qwen3-8B", ("litellm", "hosted_vllm/Qwen/Qwen3-8B")),
])
def test_parse_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("bad", ["", "   ", None])
def test_parse_spec_rejects_empty(bad):
    with pytest.raises(ValueError):
        parse_spec(bad)


def test_make_lm_litellm_passthrough():
    lm = make_lm("openai/gpt-4.1-mini", api_base="http://localhost:1/v1", api_key="x", temperature=0.3)
    assert isinstance(lm, dspy.LM) and lm.model == "openai/gpt-4.1-mini"
    assert lm.kwargs["temperature"] == 0.3


def test_make_lm_local_path(tmp_path, monkeypatch):
    gguf = tmp_path / "Tiny-Model.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    built = {}

    def fake_build(path, **kw):
        built["path"], built["kw"] = path, kw
        return FakeLlama()

    monkeypatch.setattr(local_mod, "_build_llama", fake_build)
    lm = make_lm(f"local:{gguf}", n_ctx=1024, n_threads=1)
    assert lm.model == "local/Tiny-Model.Q4"
    assert lm("hi")
    assert built["path"] == str(gguf) and built["kw"]["n_ctx"] == 1024 and built["kw"]["n_threads"] == 1


def test_missing_gguf_path_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF model not found"):
        make_lm(f"local:{tmp_path / 'nope.gguf'}")


def test_default_model_path_error_mentions_install(monkeypatch):
    monkeypatch.delenv(local_mod.MODEL_ENV_VAR, raising=False)
    monkeypatch.setattr(local_mod, "DEFAULT_GGUF_PACKAGE", "no_such_pkg_for_dspy_adaptive_tests")
    with pytest.raises(FileNotFoundError, match=r'pip install -e "\.\[local\]"'):
        local_mod.default_model_path()


def test_default_model_path_env_override(tmp_path, monkeypatch):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv(local_mod.MODEL_ENV_VAR, str(gguf))
    assert local_mod.default_model_path() == str(gguf)


def test_the_routers_number_answer_is_held_to_digits_under_a_grammar():
    import dspy
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    from dspy_adaptive.lm.local import llama_response_format
    from dspy_adaptive.program.routed import _router_signature

    schema = llama_response_format(_get_structured_outputs_response_format(
        _router_signature(("request",), "Route.")))["schema"]
    assert schema["properties"]["slot"]["pattern"] == "^[0-9]{1,2}$"
    other = llama_response_format(_get_structured_outputs_response_format(dspy.Signature("q -> answer")))["schema"]
    assert "pattern" not in other["properties"]["answer"]
