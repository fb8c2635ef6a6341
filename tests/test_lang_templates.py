"""One template search path: the checker and the runtime look up a role's template alike."""

from lang_cases import BASE

from srpo_dsl.lang import analyze
from srpo_dsl.lang.templates import PACKAGE_TEMPLATES, template_search_path
from srpo_dsl.runtime.prompts import PromptRenderer

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
