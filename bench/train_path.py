"""How `srpo-dsl train` reaches its first optimizer step, measured on this code.

Runs `srpo-dsl train workflows/quickstart.srpo` for one small step in this process under a profile hook and
prints, from the functions that actually ran:

- how often the workflow was compiled (`lang.syntax.parser.parse`, `lang.analysis` analyses) and the training
  options resolved (`resolve_options`);
- the srpo_dsl files whose code ran between entering `train_cmd` and the first optimizer step
  (DeepSpeed's `engine.step`), and the packages they sit in;
- the call chain at that step: the files from `train_cmd` down, and how often it moves between packages;
- the largest file (lines) and the largest function (lines) of the package (read with `ast`).

    python bench/train_path.py            # a table
    python bench/train_path.py --json     # the same figures as one JSON object
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "srpo_dsl"
COUNTED = {  # figure -> (file under srpo_dsl, function name)
    "parses": ("lang/syntax/parser.py", "parse"),
    "analyses": ("lang/analysis.py", "_analyze"),
}
RESOLVES = "resolve_options"  # wherever it lives: the training options resolved from the file and the flags
ARGS = ["--steps", "1", "--option", "batch=2", "--option", "group=2", "--option", "eval_size=2"]
ARGS += ["--option", "eval_k=1", "--option", "save_every=100", "--device", "cpu"]


@functools.cache  # the hook asks on every call
def relative(filename: str) -> str | None:
    """`lang/syntax/parser.py` for a file of the package, else None."""
    path = Path(filename)
    return str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else None


class Probe:
    """The profile hook: counts the calls named in COUNTED, records the files that run after `train_cmd`
    is entered, and the call chain at the first `engine.step`."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.entered = False
        self.files: set[str] = set()
        self.chain: list[str] | None = None

    def __call__(self, frame, event, arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        here = relative(code.co_filename)
        for figure, (file, name) in COUNTED.items():
            if here == file and code.co_name == name:
                self.calls[figure] += 1
        if here is not None and code.co_name == RESOLVES:
            self.calls["option resolutions"] += 1
        if here == "cli/train_cmds.py" and code.co_name == "train_cmd":
            self.entered = True
        if not self.entered or self.chain is not None:
            return
        if here is not None:
            self.files.add(here)
        if code.co_name == "step" and code.co_filename.endswith("deepspeed/runtime/engine.py"):
            self.chain = call_chain(frame)


def call_chain(frame) -> list[str]:
    """The package's files on the stack, outermost first, from `train_cmd` on (repeats in a row merged)."""
    files: list[str] = []
    while frame is not None:
        here = relative(frame.f_code.co_filename)
        if here is not None and (not files or files[-1] != here):
            files.append(here)
        if here == "cli/train_cmds.py" and frame.f_code.co_name == "train_cmd":
            break
        frame = frame.f_back
    return files[::-1]


def package(file: str) -> str:
    """`rl/loop` for `rl/loop/trainer.py`; `srpo_dsl` for a top-level module."""
    parent = str(Path(file).parent)
    return "srpo_dsl" if parent == "." else parent


def moves(chain: list[str]) -> int:
    """How often the chain passes from one package into another."""
    return sum(package(a) != package(b) for a, b in itertools.pairwise(chain))


def largest() -> dict[str, object]:
    """The longest file and the longest function (lines, with its decorators) of the package."""
    files = {str(p.relative_to(PACKAGE)): p.read_text() for p in PACKAGE.rglob("*.py")}
    name, text = max(files.items(), key=lambda kv: kv[1].count("\n"))
    functions = [
        (node.end_lineno - node.lineno + 1, f"{file}:{node.name}")
        for file, source in files.items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    lines, function = max(functions)
    return {
        "largest file": f"{name} ({text.count(chr(10))} lines)",
        "largest function": f"{function} ({lines} lines)",
    }


def measure() -> dict[str, object]:
    from typer.main import get_command

    from srpo_dsl.cli.main import app

    probe = Probe()
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", str(ROOT / "workflows/quickstart.srpo"), "--out", f"{tmp}/run", *ARGS]
        sys.setprofile(probe)
        try:
            get_command(app).main(argv, standalone_mode=False)
        finally:
            sys.setprofile(None)
    chain = probe.chain or []
    return {
        "compiles (parse, analyse)": f"{probe.calls['parses']}, {probe.calls['analyses']}",
        "option resolutions": probe.calls["option resolutions"],
        "files run before the first optimizer step": len(probe.files),
        "packages they sit in": len({package(f) for f in probe.files}),
        "files on the call chain at that step": len(chain),
        "package moves on that chain": moves(chain),
        "chain": " > ".join(chain),
        **largest(),
    }


def this_checkout() -> None:
    """Import `srpo_dsl` from the checkout this script lives in (the profile hook only sees its files); one
    line and exit 1 where another copy was imported already (an editable install of another checkout)."""
    sys.path.insert(0, str(ROOT))
    import srpo_dsl

    found = Path(srpo_dsl.__file__).resolve().parent
    if found != PACKAGE:
        sys.exit(
            f"error: srpo_dsl was imported from {found}, not from this checkout ({PACKAGE}): nothing to measure"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    this_checkout()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    figures = measure()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    width = max(map(len, figures))
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
