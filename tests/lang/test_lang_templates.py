"""One template search path: the checker and the runtime look up a role's template alike."""

import os
import time
from pathlib import Path

import pytest
from lsprotocol.types import Position

from srpo_dsl.lang import analyze
from srpo_dsl.lang.checks import templates
from srpo_dsl.lang.checks.templates import PACKAGE_TEMPLATES, template_search_path
from srpo_dsl.lsp.diagnostics import diagnose
from srpo_dsl.lsp.navigation import definition, hover
from srpo_dsl.lsp.view import View
from srpo_dsl.runtime.prompts import PromptError, PromptRenderer
from tests.support.lang_cases import BASE

CONTEXT = {
    "task": {"question": "17+25"},
    "step": 1,
    "turn": 1,
    "max_turns": 1,
    "role": "agg",
    "replica": 1,
    "pool_size": 1,
    "team_context": [],
    "feedback": [],
    "documents": [],
    "memory": {"accepted": [], "feedback": [], "documents": []},
}


def _workflow(folder, template: str) -> str:
    (folder / "p.j2").write_text("{{ task.question }}")
    return BASE.replace('agent agg uses lm prompt "p.j2"', f'agent agg uses lm prompt "{template}"')


def test_the_workflow_folder_comes_first_then_the_package_defaults(tmp_path):
    assert template_search_path([tmp_path]) == [tmp_path, PACKAGE_TEMPLATES]
    assert PromptRenderer([tmp_path]).search_dirs == template_search_path([tmp_path])


def test_a_package_default_is_found_by_the_checker_and_the_renderer(tmp_path):
    text = _workflow(tmp_path, "default_role.j2")
    assert analyze(text, str(tmp_path / "w.srpo")).diagnostics == []
    assert PromptRenderer([tmp_path]).render("default_role.j2", CONTEXT).startswith("Question: 17+25\n")


def test_a_template_in_the_workflow_folder_shadows_the_package_default_for_both(tmp_path):
    (tmp_path / "default_role.j2").write_text("mine: {{ task.question }} {{ hstory }}")
    text = _workflow(tmp_path, "default_role.j2")
    (diag,) = analyze(text, str(tmp_path / "w.srpo")).diagnostics
    assert (diag.code, diag.message) == (
        "E082",
        "template `default_role.j2` line 1 uses `hstory`, which no step provides",
    )
    (tmp_path / "default_role.j2").write_text("mine: {{ task.question }}")
    assert PromptRenderer([tmp_path]).render("default_role.j2", CONTEXT) == "mine: 17+25"


@pytest.mark.parametrize(
    "body",
    [
        "{% if feedback %}{% set last = feedback[-1] %}{{ last }}{% endif %}",
        "{% for o in team_context %}{% set who = o.role %}{{ who }}{% endfor %}",
        "{% with who = role %}{% if who %}{% set n = 1 %}{{ n }}{% endif %}{% endwith %}",
        "{% macro show(o) %}{% if o %}{% set t = o.question %}{{ t }}{% endif %}{% endmacro %}{{ show(task) }}",
        "{% if feedback %}{% set last = 1 %}{% elif documents %}{% set last = 2 %}"
        "{% else %}{% set last = 3 %}{% endif %}{{ last }}",
    ],
)
def test_a_variable_the_template_sets_before_using_it_is_not_e082(tmp_path, body):
    """Jinja2's `meta` counts a name set inside an `{% if %}` as read from the context; it is not."""
    (tmp_path / "set.j2").write_text(body)
    assert analyze(_workflow(tmp_path, "set.j2"), str(tmp_path / "w.srpo")).diagnostics == []
    context = {**CONTEXT, "feedback": ["ok"], "team_context": [{"role": "solver", "text": "x"}]}
    PromptRenderer([tmp_path]).render("set.j2", context)  # renders under StrictUndefined


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "{% if feedback %}{% set last = 1 %}{% endif %}\n{{ last }}",
            "template `set.j2` line 2 uses `last`, which is not set on every path to it",
        ),
        (
            "{% for o in team_context %}{% set who = o %}{% endfor %}\n\n{{ who }}",
            "template `set.j2` line 3 uses `who`, which is not set on every path to it",
        ),
        (
            "{# tsak #}\n{{ task.question }}\n{{ tsak }}",
            "template `set.j2` line 3 uses `tsak`, which no step provides",
        ),
    ],
)
def test_a_variable_unset_where_it_is_read_is_still_e082(tmp_path, body, message):
    (tmp_path / "set.j2").write_text(body)
    (diag,) = analyze(_workflow(tmp_path, "set.j2"), str(tmp_path / "w.srpo")).diagnostics
    assert (diag.code, diag.message) == ("E082", message)
    assert diag.span.line == 9  # the agent's `prompt "..."`
    if "tsak" in body:
        assert diag.hint == "did you mean `task`?"


def _shared_template(tmp_path):
    """`tmp_path/shared/role.j2`, and a workflow folder `tmp_path/flows` beside it."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "role.j2").write_text("shared: {{ task.question }}")
    (tmp_path / "flows").mkdir()
    return tmp_path / "flows"


@pytest.mark.parametrize("given", ["../shared/role.j2", "ABSOLUTE"])
def test_a_template_given_as_a_path_is_found_by_the_checker_and_the_renderer(tmp_path, given):
    flows = _shared_template(tmp_path)
    name = str(tmp_path / "shared" / "role.j2") if given == "ABSOLUTE" else given
    assert analyze(_workflow(flows, name), str(flows / "w.srpo")).diagnostics == []
    assert PromptRenderer([flows]).render(name, CONTEXT) == "shared: 17+25"


def test_a_missing_template_path_says_which_file_was_looked_for(tmp_path):
    flows = _shared_template(tmp_path)
    (diag,) = analyze(_workflow(flows, "../shared/nope.j2"), str(flows / "w.srpo")).diagnostics
    assert (diag.code, diag.message) == ("E080", "template not found")
    assert diag.hint == f"looked for {tmp_path / 'shared' / 'nope.j2'}"
    with pytest.raises(
        PromptError, match=r"template `\.\./shared/nope\.j2` not found \(looked for .*nope\.j2\)"
    ):
        PromptRenderer([flows]).render("../shared/nope.j2", CONTEXT)


@pytest.mark.parametrize("given", ["../shared/role.j2", "ABSOLUTE", "../shared/nope.j2"])
def test_an_include_follows_the_rule_of_a_prompt(tmp_path, given):
    """One rule for every template a prompt reads: an `{% include %}` of a path is found where a prompt of
    that path is (the checker and the renderer alike), and one that is not found is E080 for both."""
    flows = _shared_template(tmp_path)
    name = str(tmp_path / "shared" / "role.j2") if given == "ABSOLUTE" else given
    (flows / "main.j2").write_text(f"{{% include '{name}' %}}")
    as_prompt = analyze(_workflow(flows, name), str(flows / "w.srpo")).diagnostics
    as_include = analyze(_workflow(flows, "main.j2"), str(flows / "w.srpo")).diagnostics
    assert [(d.code, d.hint) for d in as_include] == [(d.code, d.hint) for d in as_prompt]
    if "nope" in name:
        assert as_include[0].message == "template `../shared/nope.j2` (included by `main.j2`) not found"
        with pytest.raises(PromptError, match=r"template `\.\./shared/nope\.j2` not found \(looked for "):
            PromptRenderer([flows]).render("main.j2", CONTEXT)
    else:
        assert as_include == [] and PromptRenderer([flows]).render("main.j2", CONTEXT) == "shared: 17+25"


@pytest.mark.parametrize("chain", [["part.j2"], ["middle.j2", "part.j2"]])
def test_a_variable_set_in_an_included_template_is_not_carried_out_of_it(tmp_path, chain):
    """`{% include %}` renders the included file in a context of its own: its `{% set %}` stays there.
    The hint names the including template's variable and the include, not a close context name."""
    (tmp_path / "part.j2").write_text("{% set step_note = 'checked' %}part")
    (tmp_path / "middle.j2").write_text("{% include 'part.j2' %}")
    (tmp_path / "main.j2").write_text(f"{{% include '{chain[0]}' %}}\n{{{{ step_note }}}}")
    (diag,) = analyze(_workflow(tmp_path, "main.j2"), str(tmp_path / "w.srpo")).diagnostics
    assert (diag.code, diag.span.line) == ("E082", 9)
    assert diag.message == (
        "template `main.j2` line 2 uses `step_note`, which only `part.j2` sets: Jinja does not carry "
        "variables set inside an `{% include %}` out of it"
    )
    assert diag.hint == (
        "set `step_note` in `main.j2` itself, or move what reads it into `part.j2` "
        "(an included template sees the includer's variables, not the other way round)"
    )
    with pytest.raises(PromptError, match="step_note"):  # what the check predicts: rendering fails
        PromptRenderer([tmp_path]).render("main.j2", CONTEXT)


def test_the_template_checks_follow_the_files_they_read(tmp_path, monkeypatch):
    """The checks are cached (workflows share templates), each result with the state of every file it
    read: a file rewritten at once with the same size (its time may not change within the filesystem's
    tick) is read again, an unchanged settled one is not, a deleted one is E080."""
    text, path = _workflow(tmp_path, "t.j2"), str(tmp_path / "w.srpo")
    role = tmp_path / "t.j2"

    def problems() -> list[tuple[str, str]]:
        return [(d.code, d.message) for d in analyze(text, path).diagnostics]

    role.write_text("{{ aaaa }}")
    assert problems() == [("E082", "template `t.j2` line 1 uses `aaaa`, which no step provides")]
    role.write_text("{{ bbbb }}")
    assert problems() == [("E082", "template `t.j2` line 1 uses `bbbb`, which no step provides")]
    role.write_text("{{ task.question }}")
    long_ago = time.time_ns() - 60 * 10**9
    for settled in (role, tmp_path / "p.j2"):
        os.utime(settled, ns=(long_ago, long_ago))
    assert problems() == []
    checks, check = [], templates._template_problems
    monkeypatch.setattr(templates, "_template_problems", lambda *a: checks.append(a[0]) or check(*a))
    assert problems() == [] and checks == []  # served from the cache: nothing changed
    role.unlink()
    assert problems() == [("E080", "template not found")] and checks == ["t.j2"]


def test_a_folder_that_cannot_be_searched_is_e081_and_navigation_says_so(tmp_path, monkeypatch):
    """In-process, with `os.stat` denied under `locked/` (root searches any folder; tests/lsp/test_lsp_watch.py
    makes a real one by dropping root's override): E081 "cannot be read", not E080 "not found"; hover
    says so, go to definition finds nothing, neither raises."""
    text, path = _workflow(tmp_path, "locked/t.j2"), str(tmp_path / "w.srpo")
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "t.j2").write_text("{{ task.question }}")
    real_stat = os.stat

    def stat(where, *args, **kwargs):
        if (tmp_path / "locked") in Path(where).parents:
            raise PermissionError(13, "Permission denied", str(where))
        return real_stat(where, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    (diag,) = analyze(text, path).diagnostics
    assert (diag.code, diag.message) == ("E081", "template cannot be read: Permission denied")
    assert (
        diag.hint
        == f"{tmp_path / 'locked' / 't.j2'}: check the permissions of the file and of the folders above it"
    )
    line = text.splitlines().index('agent agg uses lm prompt "locked/t.j2" emits final_boxed')
    view = View.of(diagnose(text, path)[1], text)
    shown = hover(view, Position(line=line, character=7)).contents.value
    assert '"locked/t.j2" (cannot be read: Permission denied)' in shown
    at = Position(line=line, character=text.splitlines()[line].index("locked/"))
    assert definition(view, Path(path).as_uri(), at) is None
