"""Running compiled specialists: bridge calls, tools, errors, state isolation."""

from __future__ import annotations

import threading

import dspy
import pytest

from dspy_adaptive.sandbox import SandboxPool, SpecialistError, compile_program
from dspy_adaptive.sandbox.testing import FakeBridge, run_bypassing_policy, run_code

TWO_STEP = '''import re

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.draft = dspy.ChainOfThought("question -> answer")
        self.check = dspy.Predict("question, answer -> verdict, fixed_answer", instructions="Check the answer.")

    def forward(self, question):
        d = self.draft(question=question)
        c = self.check(question=question, answer=d.answer)
        ans = c.fixed_answer if c.verdict.strip().lower().startswith("wrong") else d.answer
        hits = search(query=question, k=3)
        print("hits:", len(hits))
        return dspy.Prediction(answer=re.sub(r"\\s+", " ", ans).strip(), n_hits=len(hits), reasoning=d.reasoning)
'''


def prog(src):
    res = compile_program(src)
    assert res.ok, res.reasons
    return res.program


def simple(body: str, args: str = "x", header: str = "") -> str:
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return f"{header}\nclass Solver(dspy.Module):\n    def forward(self, {args}):\n{lines}\n"


def test_two_predictor_specialist_with_tool(pool, bridge):
    res = pool.run_detailed(prog(TWO_STEP), {"question": "What  is 6*7?"}, bridge)
    assert res.outputs == {"answer": "answer:What is 6*7?", "n_hits": 1, "reasoning": "because"}
    assert res.stdout == "hits: 1\n" and res.predictor_calls == 2 and res.tool_calls == 1
    assert bridge.calls == [
        dict(name="draft", kind="ChainOfThought", signature="question: str -> answer: str", instructions=None,
             inputs={"question": "What  is 6*7?"}),
        dict(name="check", kind="Predict", signature="question: str, answer: str -> verdict: str, fixed_answer: str",
             instructions="Check the answer.", inputs={"question": "What  is 6*7?", "answer": "answer:What  is 6*7?"}),
    ]
    assert bridge.tool_calls == [dict(name="search", kwargs={"query": "What  is 6*7?", "k": 3})]
    assert threading.get_ident() not in bridge.threads   # served in a helper thread (so a deadline can cut it)...


def test_run_returns_fields_only(pool, bridge):
    assert pool.run(prog(simple("return dspy.Prediction(answer=x * 2)")), {"x": 21}, bridge) == {"answer": 42}


def test_bridge_runs_under_callers_dspy_context(pool):
    seen = []

    class TraceBridge(FakeBridge):
        def predict(self, request):
            seen.append(dspy.settings.trace)
            dspy.settings.trace.append(request.name)
            return super().predict(request)

    trace: list = []
    with dspy.context(trace=trace):
        pool.run(prog(TWO_STEP), {"question": "q"}, TraceBridge())
    assert seen and all(t is trace for t in seen) and trace == ["draft", "check"]


def test_class_signature_is_lowered(pool, bridge):
    src = '''
class QA(dspy.Signature):
    """Answer the question briefly."""
    context: list[str] = dspy.InputField(desc="passages")
    question: str = dspy.InputField()
    answer: int = dspy.OutputField()

class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.steps = [dspy.Predict(QA), dspy.Predict(dspy.Signature("a -> b", "Do it."))]

    def forward(self, question):
        r = self.steps[0](context=["c"], question=question)
        s = self.steps[1](a=r.answer)
        return dspy.Prediction(answer=r.answer, b=s.b)
'''
    out = pool.run(prog(src), {"question": "q"}, bridge)
    assert out == {"answer": "answer:['c']", "b": "b:answer:['c']"}
    c0, c1 = bridge.calls
    assert (c0["name"], c0["signature"]) == ("steps[0]", "context: list[str], question: str -> answer: int")
    assert c0["instructions"] == "Answer the question briefly.\n\nFields:\n- context: passages"
    assert (c1["name"], c1["signature"], c1["instructions"]) == ("steps[1]", "a: str -> b: str", "Do it.")


def test_unknown_tool_is_name_error(pool, bridge):
    with pytest.raises(SpecialistError) as ei:
        pool.run(prog(simple("return dspy.Prediction(answer=lookup(query=x))")), {"x": "q"}, bridge)
    assert ei.value.kind == "exception"
    assert ei.value.reason == "NameError: name 'lookup' is not defined (line 4)"


def test_tool_positional_args_rejected(pool, bridge):
    with pytest.raises(SpecialistError, match="keyword arguments only"):
        pool.run(prog(simple("return dspy.Prediction(answer=search(x))")), {"x": "q"}, bridge)


def test_forward_must_return_prediction(pool, bridge):
    with pytest.raises(SpecialistError) as ei:
        pool.run(prog(simple("return 'just a string'")), {"x": 1}, bridge)
    assert ei.value.reason == "forward must return dspy.Prediction, got str" and ei.value.kind == "exception"


def test_open_is_name_error_at_runtime_when_policy_bypassed(pool, bridge):
    # restricted worker path without the host's static policy: the runtime builtins still lack open
    src = simple("return dspy.Prediction(answer=open('/etc/passwd').read())")
    with pytest.raises(SpecialistError) as ei:
        run_bypassing_policy(pool, src, {"x": 1}, bridge)
    assert ei.value.reason.startswith("NameError: name 'open' is not defined")


def test_bridge_exception_visible_and_catchable(pool):
    caught = simple('''
try:
    self_p = dspy.Predict("x -> y")
    self_p(x=x)
except dspy.HostError as e:
    return dspy.Prediction(answer="caught: " + str(e))
''')
    out = pool.run(prog(caught), {"x": "q"}, FakeBridge(fail_on="anonymous_predict_1"))
    # the sandbox learns what failed and the exception type -- never the host's message (host state)
    assert out == {"answer": "caught: predictor 'anonymous_predict_1' failed: predictor 'anonymous_predict_1' "
                             "failed (ValueError)"}

    uncaught = '''
class Solver(dspy.Module):
    def __init__(self):
        super().__init__()
        self.gen = dspy.Predict("x -> y")

    def forward(self, x):
        return dspy.Prediction(answer=self.gen(x=x).y)
'''
    with pytest.raises(SpecialistError) as ei:
        pool.run(prog(uncaught), {"x": "q"}, FakeBridge(fail_on="gen"))
    assert ei.value.kind == "exception"
    assert "predictor 'gen' failed (ValueError)" in ei.value.reason
    # the host-side record keeps the host's own message (for reflection and logs), and the exception is chained
    assert ei.value.reason.endswith("[host: ValueError: lm exploded in gen]")
    assert isinstance(ei.value.__cause__, ValueError)


def test_predictor_limit_even_if_caught(pool, bridge):
    src = simple('''
p = dspy.Predict("q -> a")
n = 0
for i in range(50):
    try:
        p(q=str(i))
        n += 1
    except Exception:
        pass
return dspy.Prediction(answer=n)
''')
    with pytest.raises(SpecialistError) as ei:
        pool.run(prog(src), {"x": 1}, bridge)
    assert ei.value.kind == "predictor_limit" and ei.value.reason == "predictor call limit (20) exceeded"
    assert len(bridge.calls) == 20


def test_no_state_leaks_between_calls(pool, bridge):
    src = '''import decimal
CACHE = []

class Solver(dspy.Module):
    seen = []

    def forward(self, x):
        Solver.seen.append(x)
        CACHE.append(x)
        before = str(decimal.Decimal(1) / decimal.Decimal(3))
        return dspy.Prediction(answer=len(Solver.seen) + len(CACHE), before=before)
'''
    p = prog(src)
    outs = [pool.run(p, {"x": i}, bridge) for i in range(6)]
    assert all(o["answer"] == 2 for o in outs)
    assert all(o["before"] == "0.3333333333333333333333333333" for o in outs)


def test_inputs_dict_not_affected(pool, bridge):
    src = simple('kw["x"] = "pwned"\nkw.clear()\nreturn dspy.Prediction(answer="ok")', args="**kw")
    inputs = {"x": "orig"}
    assert pool.run(prog(src), inputs, bridge) == {"answer": "ok"}
    assert inputs == {"x": "orig"}


def test_uncompiled_program_rejected(pool, bridge):
    from dspy_adaptive.sandbox import CompiledProgram

    fake = CompiledProgram(source="import os\n", class_name="Solver", source_hash="0" * 64)
    with pytest.raises(SpecialistError) as ei:
        pool.run(fake, {}, bridge)
    assert ei.value.kind == "policy"


def test_output_json_compatible(pool, bridge):
    src = simple("return dspy.Prediction(answer=(1, 2), s={3}, d={'k': [1.5, None, True]})")
    out = pool.run(prog(src), {"x": 1}, bridge)
    assert out == {"answer": [1, 2], "s": "{3}", "d": {"k": [1.5, None, True]}}


def test_pool_closed_rejects(bridge):
    p = SandboxPool(max_workers=1, timeout=2)
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.run(prog(simple("return dspy.Prediction(answer=x)")), {"x": 1}, bridge)


def test_workers_run_the_code_the_host_compiled_once(pool, bridge):
    import marshal

    from dspy_adaptive.sandbox import policy

    src = simple("return dspy.Prediction(answer=x * 2)")
    program = prog(src)
    code = marshal.loads(program.code)
    assert code.co_filename == policy.FILENAME and code.co_code == policy.restricted_compile(src)[0].co_code
    assert pool.run(program, {"x": 21}, bridge) == {"answer": 42}
    # what a worker accepts as code is checked: a code object, compiled as a specialist
    for forged in (marshal.dumps(("not", "code")), marshal.dumps(compile("x = 1", "<elsewhere>", "exec")),
                   b"\x00garbage"):
        with pytest.raises(SpecialistError) as ei:
            run_code(pool, forged, {"x": 1}, bridge, program.class_name)
        assert ei.value.kind == "protocol"
    assert pool.run(program, {"x": 1}, bridge) == {"answer": 2}   # the pool still serves


@pytest.mark.parametrize("fields", ['**{"__class__": 1}', '**{"a b": 1}', '**{"x" * 100: 1}',
                                    '**{"f" + str(i): i for i in range(100)}'])
def test_output_field_names_are_plain(pool, bridge, fields):
    with pytest.raises(SpecialistError) as ei:
        pool.run(prog(simple(f"return dspy.Prediction({fields})")), {"x": 1}, bridge)
    assert ei.value.kind == "output" and "plain identifiers" in ei.value.reason
