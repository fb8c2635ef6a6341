"""User code that ends the process or prints: a `SystemExit` from it is one error line naming the user's
file:line (exit 1, nothing written), whichever use it has, and so is a `KeyboardInterrupt` it raises
itself (a Ctrl-C while it runs stays an interrupt); what it prints reaches stderr."""

import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from srpo_dsl.cli import main as cli_main
from srpo_dsl.lang.usercode.pycode import CodeRef
from srpo_dsl.rl.loop import trainer
from srpo_dsl.rl.objective.plugins import UserTerms, locate
from srpo_dsl.runtime.usercode import UserCodeError, load_function
from tests.support.user_code import BASE_CODE, make, run_scripted


@pytest.mark.parametrize("code", [0, 5])
def test_sys_exit_in_a_reward_is_an_error_at_its_line(tmp_path, code):
    body = f"import sys\ndef leave(answer, row):\n    sys.exit({code})\n"
    r = run_scripted(tmp_path, make(tmp_path, body, reward="leave"))
    line = (BASE_CODE + body).splitlines().index(f"    sys.exit({code})") + 1
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[-1] == (
        f"error: {tmp_path / 'user.py'}:{line}: leave() raised on answer '1', task 'train-0': "
        f"SystemExit({code}): user code may not end the process, raise an exception instead"
    )
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


def test_system_exit_while_importing_is_an_error_at_its_line(tmp_path):
    r = run_scripted(tmp_path, make(tmp_path, "raise SystemExit(7)\n"))
    line = len(BASE_CODE.splitlines()) + 1
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[-1].startswith(
        f"error: {tmp_path / 'user.py'}:{line}: importing it failed: SystemExit(7): "
    )


def test_a_keyboard_interrupt_a_reward_raises_is_an_error_at_its_line_not_a_ctrl_c(tmp_path):
    body = "def halt(answer, row):\n    raise KeyboardInterrupt('no more')\n"
    r = run_scripted(tmp_path, make(tmp_path, body, reward="halt"))
    line = (BASE_CODE + body).splitlines().index("    raise KeyboardInterrupt('no more')") + 1
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[-1] == (
        f"error: {tmp_path / 'user.py'}:{line}: halt() raised on answer '1', task 'train-0': "
        "KeyboardInterrupt: no more"
    )


def test_a_keyboard_interrupt_while_importing_is_an_error_at_its_line(tmp_path):
    r = run_scripted(tmp_path, make(tmp_path, "raise KeyboardInterrupt\n"))
    line = len(BASE_CODE.splitlines()) + 1
    assert r.returncode == 1, r.stderr
    assert (
        r.stderr.splitlines()[-1]
        == f"error: {tmp_path / 'user.py'}:{line}: importing it failed: KeyboardInterrupt"
    )


def test_a_ctrl_c_while_user_code_runs_stays_an_interrupt(tmp_path):
    """A SIGINT that reaches the process while the reward runs is the user's Ctrl-C: the caller gets the
    KeyboardInterrupt (exit 130 on the command line), not an error in the reward. Under Python's own
    handler, as a command starts (an earlier test in this worker process may have left another)."""
    (tmp_path / "user.py").write_text(
        "import os, signal, time\ndef slow(answer, row):\n    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(5)\n"
    )
    reward = load_function(CodeRef("reward", "user.py:slow", str(tmp_path / "user.py"), None, "slow", 2, 2))
    outside = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            reward("1", {}, about=lambda: "a task")
        assert type(caught.value) is KeyboardInterrupt
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler there was, back
    finally:
        signal.signal(signal.SIGINT, outside)


def test_what_a_reward_prints_reaches_stderr_not_the_results(tmp_path):
    body = "def loud(answer, row):\n    print('scoring', answer)\n    return 1.0\n"
    r = run_scripted(tmp_path, make(tmp_path, body, reward="loud"))
    assert r.returncode == 0, r.stderr
    assert "scoring 1" in r.stderr.splitlines() and "scoring" not in r.stdout


def test_an_objective_that_exits_is_an_error_at_its_line(tmp_path):
    """The objective and advantage plugins call the user's function as every use does (`UserFunction`)."""
    (tmp_path / "obj.py").write_text("def terms(batch, config):\n    raise SystemExit\n")
    terms = UserTerms(locate("obj.py:terms", "objective", tmp_path), "token-mean")
    with pytest.raises(UserCodeError) as err:
        terms(SimpleNamespace(mask=torch.zeros(4, 3)), None)
    assert str(err.value) == (
        f"{tmp_path / 'obj.py'}:2: terms() raised on a batch of 4 rows: "
        "SystemExit(None): user code may not end the process, raise an exception instead"
    )


def test_an_exit_from_code_outside_srpo_dsl_is_named_an_exit_of_its_own_passes(monkeypatch, capsys):
    """A plugin's `sys.exit` anywhere in a command (a rollout engine's generate) is one line at its
    file:line, exit 1; srpo-dsl's own (a signal's exit code) is kept."""
    monkeypatch.setattr(cli_main, "app", lambda **_: sys.exit(4))
    with pytest.raises(SystemExit) as ended:
        cli_main.main([])
    line = (
        Path(__file__)
        .read_text()
        .splitlines()
        .index('    monkeypatch.setattr(cli_main, "app", lambda **_: sys.exit(4))')
    )
    assert ended.value.code == 1
    assert capsys.readouterr().err == (
        f"error: {__file__}:{line + 1}: SystemExit(4) raised there would end the command\n"
    )
    own = compile("import sys\nsys.exit(143)", str(Path(trainer.__file__)), "exec")  # as its SIGTERM handler
    monkeypatch.setattr(cli_main, "app", lambda **_: exec(own))
    with pytest.raises(SystemExit) as ended:
        cli_main.main([])
    assert ended.value.code == 143 and capsys.readouterr().err == ""
