"""Reports, notebook tables, benchmark tables and exported files show hostile LM-written text as it is,
and nothing in it acts: a real search whose reflection writes a description with a fence breakout, HTML,
images, links, a table row and bidirectional controls, a program with long backtick runs and HTML in its
strings, and a rejected program hiding a right-to-left override. The report is parsed as a Markdown
renderer parses it (markdown-it)."""

from __future__ import annotations

import json
import os

import dspy
import pytest
from markdown_it import MarkdownIt

from dspy_adaptive import AdaptiveGEPA, Library, RoutedProgram, Slot, load_run
from dspy_adaptive.escaping import first_hidden, visible_controls
from dspy_adaptive.program.routed import HIDDEN_SOURCE_NOTE, ExportError
from dspy_adaptive.record.analysis import PROPOSAL_HEADERS, library_markdown, markdown_table, proposal_rows
from dspy_adaptive.record.run_record import render_markdown, sandbox_markdown
from dspy_adaptive.sandbox import compile_program
from dspy_adaptive.testing import scripted_lm
from tests.core import toy

HOSTILE_DESC = ("Arithmetic: additions ('add:').\n```\n````\n"
                "</pre><img src=https://evil.example/x.png onerror=alert(1)>\n# Injected heading\n"
                "| forged | row |\n\u202eelif is_admin:\u2066 [click](javascript:alert(1)) "
                "![pixel](https://evil.example/p.png) &#x202E; \x1b[31mred\u200b")
HOSTILE_SOURCE = toy.ADD_SOURCE + (
    '\nTICKS = "``````"\nMARKUP = "<script>alert(1)</script> <!-- -->"\n'
    'FAKE = """\n```\n# Not a heading\n"""\n')
TROJAN = toy.ADD_SOURCE + '\nACCESS = "user\u202e \u2066# admin\u2069 \u2066"\n'
HOSTILE_ROUTER = "Route by capability.\n```\n<b>bold</b> \u202eoverride"


def hostile_reflection(call):
    fields = call.output_fields
    specialists = call.field("specialists") or ""
    active = "1 (active" in specialists
    if "action" in fields:
        return {"action": "rewrite_program" if active else "activate", "slot": "1"}
    if "profile" in fields:
        return {"description": HOSTILE_DESC, "program": HOSTILE_SOURCE, "profile": "fast"}
    if "new_program" in fields:
        return {"new_program": TROJAN}           # the policy refuses it: a rejected proposal with its source
    return "unsupported"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile-run")
    train, val = toy.make_examples(3), toy.make_examples(3, offset=100)
    with dspy.context(lm=toy.actor_lm()):
        routed = AdaptiveGEPA(toy.metric, reflection_lm=scripted_lm(hostile_reflection), max_metric_calls=40,
                              reflection_minibatch_size=4, seed=1, use_merge=False, track_stats=True,
                              skip_perfect_score=False, candidate_selection_strategy="current_best",
                              progress=False, log_dir=str(out), proposal_format="code").compile(
            dspy.Predict("question -> answer"), trainset=train, valset=val)
    yield out, routed
    routed.close()


def _tokens(markdown: str):
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(markdown)
    flat = list(tokens) + [c for t in tokens for c in (t.children or [])]
    return tokens, flat


def _cells_per_row(tokens) -> list[int]:
    counts = []
    for t in tokens:
        if t.type == "tr_open":
            counts.append(0)
        elif t.type in ("td_open", "th_open"):
            counts[-1] += 1
    return counts


def test_the_run_really_holds_the_hostile_texts(run):
    out, routed = run
    result = load_run(out)
    best = result.best_candidate
    assert best.slot(1).description == HOSTILE_DESC and best.slot(1).program_source.strip() == HOSTILE_SOURCE.strip()
    rejected = [p for p in result.proposals if p["failure"] == "sandbox_rejected"]
    assert rejected and "\u202e" in rejected[0]["details"]["rejected_source"] and "U+202E" in rejected[0]["reason"]


def test_report_shows_hostile_text_inert_and_exact(run):
    out, _ = run
    report = (out / "report.md").read_text(encoding="utf-8")
    best = load_run(out).best_candidate
    assert first_hidden(report) is None                       # no raw bidi/zero-width/escape characters
    assert "\\u202e" in report and "\\u001b" in report
    tokens, flat = _tokens(report)
    assert not [t for t in flat if t.type in ("html_block", "html_inline", "image", "link_open")]
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert not [h for h in headings if "Injected" in h or "Not a heading" in h]
    fences = [t for t in tokens if t.type == "fence"]
    # a rejected answer and its reason, the accepted edits (each slot's description and program, issue 28), then
    # the best library
    samples, edits, library = fences[:2], fences[2:-3], fences[-3:]
    assert edits and [f.info for f in edits] == ["text", "python"] * (len(edits) // 2)
    assert visible_controls(HOSTILE_DESC) in [f.content.rstrip("\n") for f in edits]
    assert [f.content.rstrip("\n") for f in library] == [
        visible_controls(best.router), visible_controls(HOSTILE_DESC), best.slot(1).program_source.rstrip("\n")]
    assert [f.info for f in library] == ["text", "text", "python"]
    assert len(samples) == 2 and all(f.info == "text" for f in samples)
    assert "ACCESS" in samples[0].content and "\\u202e" in samples[0].content   # shown, visibly and inert


def test_notebook_tables_and_library_are_inert(run):
    out, _ = run
    result = load_run(out)
    table = markdown_table(PROPOSAL_HEADERS, proposal_rows(result))
    tokens, flat = _tokens(table)
    assert not [t for t in flat if t.type in ("html_block", "html_inline", "image", "link_open")]
    assert set(_cells_per_row(tokens)) == {len(PROPOSAL_HEADERS)}
    assert len(_cells_per_row(tokens)) == len(result.proposals) + 1
    assert "U+202E" in table and first_hidden(table) is None
    lib_md = library_markdown(result.best_candidate)
    tokens, flat = _tokens(lib_md)
    assert not [t for t in flat if t.type in ("html_block", "html_inline", "image", "link_open")]
    assert [t.content.rstrip("\n") for t in tokens if t.type == "fence"][1] == visible_controls(HOSTILE_DESC)


def test_export_writes_what_runs_and_escapes_the_rest(run, tmp_path):
    _, routed = run
    routed.export(tmp_path / "lib")
    program = (tmp_path / "lib" / "slot_1" / "program.py").read_text(encoding="utf-8")
    assert program == routed.library.slot(1).program_source and compile_program(program).ok   # shown == run
    for path in (tmp_path / "lib").rglob("*"):
        if path.is_file():
            assert first_hidden(path.read_text(encoding="utf-8")) is None, path
    assert "\\u202e" in (tmp_path / "lib" / "slot_1" / "description.txt").read_text()
    assert json.loads((tmp_path / "lib" / "library.json").read_text()) == routed.library.to_dict()


def test_export_of_a_library_that_bypassed_the_policy_says_so(tmp_path):
    lib = Library.empty(2).with_slot(1, Slot().activated("x", TROJAN, "fast")).with_router(HOSTILE_ROUTER)
    rp = RoutedProgram(dspy.Predict("question -> answer"), lib)
    rp.export(tmp_path / "lib")
    program = (tmp_path / "lib" / "slot_1" / "program.py").read_text()
    assert program.startswith(HIDDEN_SOURCE_NOTE) and "\\u202e" in program and first_hidden(program) is None
    assert not compile_program(TROJAN).ok                     # and the library's source never runs
    assert (tmp_path / "lib" / "router.txt").read_text() == visible_controls(HOSTILE_ROUTER) + "\n"


def test_export_never_writes_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "lib"
    root.mkdir()
    os.symlink(outside, root / "slot_1")
    rp = RoutedProgram(dspy.Predict("question -> answer"), Library.empty(2))
    with pytest.raises(ExportError, match="symbolic link"):
        rp.export(root)
    assert list(outside.iterdir()) == [] and list(root.iterdir()) == [root / "slot_1"]   # nothing written at all
    os.symlink(outside / "router.txt", tmp_path / "r.txt")
    (root / "slot_1").unlink()
    os.symlink(tmp_path / "r.txt", root / "router.txt")
    with pytest.raises(ExportError):
        rp.export(root)
    assert not (outside / "router.txt").exists()


def test_sandbox_section_says_which_layers_held_and_why_not(run):
    out, _ = run
    record = json.loads((out / "run.json").read_text())["sandbox"]
    assert set(record["requested"]) == {"rlimits", "uid", "landlock", "seccomp", "netns"}
    report = (out / "report.md").read_text()
    section = report[report.index("## Sandbox"):]
    for layer in record["requested"]:
        assert f"| {layer} | {'no' if layer in record['missing'] else 'yes'}" in section
    weak = dict(record, root=False, missing={"uid": "not root: workers keep the user's uid",
                                             "netns": "no user namespaces <here>"})
    lines = "\n".join(sandbox_markdown(weak))
    assert "3 of 5 OS layers held" in lines and "| uid | no | not root: workers keep the user's uid |" in lines
    assert "&lt;here&gt;" in lines
    assert "_No isolation report was recorded" in "\n".join(sandbox_markdown({}))


def test_report_of_an_old_run_without_a_sandbox_record(run):
    out, _ = run
    d = json.loads((out / "run.json").read_text())
    d.pop("sandbox")
    from dspy_adaptive.record.run_record import AdaptiveGEPAResult
    assert "No isolation report" in render_markdown(AdaptiveGEPAResult.from_dict(d))


def test_benchmark_tables_keep_their_columns():
    from benchmarks.tables import render_run
    rows = [{"id": "1", "family": "fam|ily <b>x</b>\nnext", "score": 1.0, "route": 0}]
    text = render_run({"method": "seed", "budget": {"used": 0, "nominal": 0}, "test": rows})
    tokens, flat = _tokens(text)
    assert not [t for t in flat if t.type in ("html_block", "html_inline")]
    assert _cells_per_row(tokens) == [5, 5]    # Method, Budget, the one family, Family mean, Example mean
