"""Input a user can fix is one `error:` line and exit code 1, not the "internal error" of a bug (3): a
template that fails while it renders, a reply script without an entry for an agent, a DeepSpeed config
whose optimizer DeepSpeed does not build."""

import json

import pytest

from tests.support.clitools import cli

WORKFLOW = (
    "workflow w\n"
    'policy lm = hf("srpo-dsl-tests/not-here") with (max_tokens = 5)\n'
    "task arith(n = 4, eval_n = 2)\n"
    'agent a uses lm prompt "a.j2" emits boxed\n'
    "aggregate a\n"
    "reward exact_match(a, task.answer)\n"
)


def _workflow(tmp_path, template):
    (tmp_path / "a.j2").write_text(template)
    (tmp_path / "w.srpo").write_text(WORKFLOW)
    (tmp_path / "r.json").write_text(json.dumps({"a": ["\\boxed{1}"]}))
    return tmp_path / "w.srpo", ("--backend", "scripted", "--model", tmp_path / "r.json", "--limit", "1")


@pytest.mark.parametrize(
    ("template", "line", "reason"),
    [
        ("Solve.\n{{ 1/0 }}\n", 2, "ZeroDivisionError: division by zero"),
        ("{% for i in range(100001) %}x{% endfor %}", 1, "OverflowError: Range too big."),
        ("{{ task.__class__ }}", 1, "access to attribute '__class__' of 'dict' object is unsafe"),
        ("{% set n = 99999999 %}\n{{ 9 ** n }}", 2, "`**` would build a number of about 399,999,996 bits"),
    ],
)
def test_a_template_that_fails_while_rendering_is_its_file_line(tmp_path, template, line, reason):
    """`render`, `run` and `eval` say the same line: the template's FILE:LINE and what failed; exit 1,
    and `run` writes nothing."""
    workflow, args = _workflow(tmp_path, template)
    said = f"error: {tmp_path / 'a.j2'}:{line}: template `a.j2`: {reason}"
    rendered = cli("render", workflow, "--role", "a", timeout=60)
    ran = cli("run", workflow, *args, "--out", tmp_path / "out", timeout=60)
    for result in (rendered, ran):
        assert result.returncode == 1 and said in result.stderr, result.stderr
        assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_template_constant_over_the_sandbox_s_limits_is_e081_without_computing_it(tmp_path):
    """Jinja2 folds constants while it compiles, outside the sandbox: `validate` took minutes and
    gigabytes on these. Now each is E081 at the agent's prompt (`FILE:LINE:COL`), in a second."""
    templates = ["{{ 9 ** 99999999 }}", "Solve.\n{% set x = 'a' * 10000000000 %}{{ x }}"]
    said = ["`**` would build a number of about 399,999,996 bits", "`*` would build 10,000,000,000 items"]
    workflows = []
    for i, template in enumerate(templates):
        (tmp_path / str(i)).mkdir()
        workflows.append(_workflow(tmp_path / str(i), template)[0])
    checked = cli("validate", *workflows, timeout=30)
    assert checked.returncode == 1, checked.stderr
    for i, (workflow, line) in enumerate(zip(workflows, (1, 2), strict=True)):
        where = f"{workflow}:4:24: error[E081]: template `a.j2` line {line}: {said[i]}"
        assert where in checked.stdout + checked.stderr, checked.stdout + checked.stderr


def test_a_reply_script_without_a_role_is_refused_before_the_run(tmp_path):
    """A scripted run's reply script must answer every agent: one line naming the file and the role,
    exit 1, before any episode runs (`run` and `eval` alike); a "*" entry answers every role."""
    workflow, args = _workflow(tmp_path, "{{ task.question }}")
    (tmp_path / "r.json").write_text(json.dumps({"b": ["\\boxed{1}"]}))
    said = f'error: the reply script `{tmp_path / "r.json"}` has no entry for role `a` (and no "*" fallback)'
    for result in (cli("run", workflow, *args, "--out", tmp_path / "out"), cli("eval", workflow, *args)):
        assert result.returncode == 1 and said in result.stderr.splitlines(), result.stderr
        assert "episode/s" not in result.stderr  # refused before the rollouts' progress bar
    assert not (tmp_path / "out").exists()
    (tmp_path / "r.json").write_text(json.dumps({"b": ["x"], "*": ["\\boxed{1}"]}))
    assert cli("run", workflow, *args, "--out", tmp_path / "out").returncode == 0


@pytest.mark.parametrize(
    ("optimizer", "said"),
    [
        ({"type": "Nope"}, "DeepSpeed has no optimizer `Nope`: one of adagrad, adam, adamw"),
        ("adam", '"optimizer" must be an object with a "type"'),
        ({"params": {"lr": 1e-4}}, '"optimizer" must be an object with a "type"'),
    ],
)
def test_a_deepspeed_config_with_a_bad_optimizer_is_refused_in_the_dry_run(tmp_path, optimizer, said):
    """DeepSpeed would assert (or fail on an index) once the model is loaded: the plan checks first, one
    line naming the config file, exit 1, the dry run included; DeepSpeed's names (any case) and torch.optim
    classes pass."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"optimizer": optimizer}))
    args = ("train", "workflows/quickstart.srpo", "--ds-config", config, "--out", tmp_path / "r", "--dry-run")
    refused = cli(*args)
    assert refused.returncode == 1 and refused.stderr.startswith(f"error: {config}: {said}"), refused.stderr
    assert len(refused.stderr.splitlines()) == 1 and not (tmp_path / "r").exists()
    if isinstance(optimizer, dict) and "type" in optimizer:  # the name checked: DeepSpeed's or torch's pass
        from srpo_dsl.rl.loop.plan import check_ds_optimizer

        for name in ("SGD", "AdamW", "lamb"):
            check_ds_optimizer({"optimizer": {"type": name, "params": {"lr": 1e-4}}}, config)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"lr": "fast"}, "'<' not supported between instances of 'str' and 'float'"),
        ({"lr": 0.1, "bogus": 1}, "SGD.__init__() got an unexpected keyword argument 'bogus'"),
    ],
)
def test_an_optimizer_deepspeed_cannot_build_with_its_params_is_one_line(tmp_path, params, said):
    """Parameters only the optimizer's constructor checks (once the model is loaded): one line naming the
    config file and DeepSpeed's reason, exit 1, and no run folder left."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"optimizer": {"type": "SGD", "params": params}}))  # torch's: no op to build
    out = tmp_path / "r"
    args = ("train", "workflows/quickstart.srpo", "--ds-config", config, "--out", out, "--steps", "1")
    refused = cli(*args, "--batch", "2", "--group", "2")
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.startswith(f"error: {config}: DeepSpeed cannot build an engine from this config: ")
    assert said in refused.stderr and len(refused.stderr.splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("lr", ["1e38", "3e38", "2"])
def test_a_finite_learning_rate_too_large_is_refused_before_the_run(tmp_path, lr):
    """AdamW's first step is lr / (1 - beta1): past float32's range it overflowed into "internal error"
    (1e38, 3e38); the option is at most 1, refused as a usage error, and nothing is written."""
    out = tmp_path / "run"
    done = cli("train", "workflows/quickstart.srpo", "--steps", "1", "--lr", lr, "--out", out)
    assert done.returncode == 2 and "internal error" not in done.stderr, done.stderr
    assert done.stderr.strip() == "error: training option `lr`: Input should be less than or equal to 1"
    assert not out.exists()
