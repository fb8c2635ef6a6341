"""How each request of `srpo-dsl lsp` grows with the file, through three clients side by side: the
quickstart workflow with its steps repeated (in loops, so it still checks) to 1,000, 5,000 and 20,000
lines; per method and client the median time of a few requests, and the growth exponent fitted to
them (the slope of log time on log lines: 1 is linear, 2 quadratic).

    python bench/lsp_scale.py                 # 1k, 5k and 20k lines, 5 requests a method
    python bench/lsp_scale.py --smoke         # a check that it runs: 1k lines, 2 methods, one each

The clients: "raw stdio", bench/lsp_client.py's JSON-RPC over the server's stdio (every method);
"Neovim", headless with editors/neovim/srpo.lua, and "VS Code client", extension.js with
vscode-languageclient under node (bench/lspscale/clients.py; the methods of CLIENT_METHODS). A client
that is missing here is skipped with a line saying why. "diagnostics" is the time from an edit to
its diagnostics in the client (10 ms of it the server waiting for more changes; in Neovim also its
debounce of didChange).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_client import ROOT, LspClient
from lspscale import clients as lsp_clients

QUICKSTART = ROOT / "workflows" / "quickstart.srpo"
LOOP = "repeat at most 2 {\n    parallel solver\n    verify verifier\n}\n"
STEPS_AT = "parallel solver "  # where the quickstart's steps start
RAW = "raw stdio"
# the methods the editor clients time (with "diagnostics"); the smoke run's methods
CLIENT_METHODS = (
    "hover",
    "completion",
    "code lens",
    "semantic tokens",
    "symbols",
    "formatting",
    "references",
)
SMOKE_METHODS = ("code lens", "hover")


def workflow(lines: int) -> str:
    """The quickstart with loops of its steps before them, to about `lines` lines."""
    text = QUICKSTART.read_text(encoding="utf-8")
    at = text.index(STEPS_AT)
    loops = max(lines - len(text.splitlines()), 0) // LOOP.count("\n")
    return text[:at] + LOOP * loops + text[at:]


def _where(text: str) -> dict:
    """A position on the last `solver` of a step (what hover, definition, references, rename ask about)."""
    lines = text.split("\n")
    line = max(i for i, x in enumerate(lines) if x.strip() == "parallel solver")
    return {"line": line, "character": lines[line].index("solver") + 2}


def requests(uri: str, text: str) -> dict[str, tuple[str, dict]]:
    """method label -> (LSP method, params) for every request the benchmark times."""
    doc = {"textDocument": {"uri": uri}}
    at = {**doc, "position": _where(text)}
    end = len(text.split("\n")) - 1
    return {
        "completion": ("textDocument/completion", {**doc, "position": {"line": end, "character": 0}}),
        "hover": ("textDocument/hover", at),
        "definition": ("textDocument/definition", at),
        "references": ("textDocument/references", {**at, "context": {"includeDeclaration": True}}),
        "rename": ("textDocument/rename", {**at, "newName": "solver2"}),
        "code lens": ("textDocument/codeLens", doc),
        "semantic tokens": ("textDocument/semanticTokens/full", doc),
        "folding": ("textDocument/foldingRange", doc),
        "symbols": ("textDocument/documentSymbol", doc),
        "formatting": ("textDocument/formatting", {**doc, "options": {"tabSize": 4, "insertSpaces": True}}),
        "links": ("textDocument/documentLink", doc),
    }


def _median(run: Callable[[], object], times: int) -> float:
    out = []
    for _ in range(times):
        start = time.perf_counter()
        run()
        out.append(time.perf_counter() - start)
    return statistics.median(out)


def measure(client: LspClient, path: Path, labels: list[str], times: int) -> dict[str, float]:
    """Median seconds per method (of `labels`) on the workflow at `path`, over raw stdio."""
    text = path.read_text(encoding="utf-8")
    uri = client.open(path, text)
    assert client.diagnostics(uri) == [], "the generated workflow does not check"
    version = iter(range(2, 10**6))

    def edit() -> None:
        v = next(version)
        client.replace(uri, text + f"# edit {v}\n", v)
        client.diagnostics(uri)

    out = {"diagnostics": _median(edit, times)}
    client.replace(uri, text, next(version))
    client.diagnostics(uri)
    asked = requests(uri, text)
    for label in labels:
        method, params = asked[label]
        out[label] = _median(lambda m=method, p=params: client.request(m, p), times)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return out


def raw(folder: Path, paths: list[Path], labels: list[str], times: int) -> list[dict[str, float]]:
    """Per workflow of `paths`, the raw stdio client's median seconds per method."""
    client = LspClient()
    try:
        client.initialize(folder)
        return [measure(client, path, labels, times) for path in paths]
    finally:
        client.close()


def _asked(path: Path, labels: list[str]) -> list[dict]:
    """The requests of `labels` on the workflow at `path`, as the editor clients' jobs list them."""
    every = requests(path.as_uri(), path.read_text(encoding="utf-8"))
    return [{"label": label, "method": every[label][0], "params": every[label][1]} for label in labels]


def editor(name: str, paths: list[Path], labels: list[str], times: int) -> list[dict[str, float]] | None:
    """Per workflow, the editor client `name`'s median seconds per method; None (said) when missing."""
    why = lsp_clients.missing(name)
    if why:
        print(f"{name}: skipped, {why}")
        return None
    asked = {path.name: _asked(path, labels) for path in paths}
    runs = lsp_clients.RUN[name](paths, asked, times)
    return [{k: statistics.median(v) for k, v in runs[path.name].items()} for path in paths]


def slope(sizes: list[int], seconds: list[float]) -> float:
    """The least-squares slope of log(seconds) on log(sizes)."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-6)) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def table(sizes: list[int], results: dict[str, list[dict[str, float]]]) -> list[str]:
    """A markdown table: a row per method and client (results: client -> per size, method -> seconds),
    the milliseconds at each size and the growth exponent (– with one size)."""
    head = "| method | client | " + " | ".join(f"{s:,} lines (ms)" for s in sizes) + " | growth exponent |"
    out = [head, "|---|---|" + "---:|" * (len(sizes) + 1)]
    for label in results[RAW][0]:
        for client, per_size in results.items():
            if label not in per_size[0]:
                continue
            row = [per_size[i][label] for i in range(len(sizes))]
            cells = " | ".join(f"{t * 1e3:.1f}" for t in row)
            fit = f"{slope(sizes, row):.2f}" if len(sizes) > 1 else "–"
            out.append(f"| {label} | {client} | {cells} | {fit} |")
    return out


def run(sizes: list[int], labels: list[str], times: int) -> dict[str, list[dict[str, float]]]:
    """client -> per size, method -> median seconds; the editor clients missing here are left out."""
    folder = Path(tempfile.mkdtemp(prefix="srpo-lsp-scale-"))
    try:
        shutil.copytree(ROOT / "workflows" / "quickstart", folder / "quickstart")
        paths = [folder / f"big{s}.srpo" for s in sizes]
        for size, path in zip(sizes, paths, strict=True):
            path.write_text(workflow(size), encoding="utf-8")
        results = {RAW: raw(folder, paths, labels, times)}
        for name in lsp_clients.RUN:
            timed = editor(name, paths, [x for x in labels if x in CLIENT_METHODS], times)
            if timed is not None:
                results[name] = timed
        return results
    finally:
        shutil.rmtree(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,20000", help="lines of the workflows, comma-separated")
    ap.add_argument("--times", type=int, default=5, help="requests a method and size (the median is shown)")
    ap.add_argument(
        "--smoke", action="store_true", help="a check that it runs: 1k lines, 2 methods, one each"
    )
    args = ap.parse_args()
    sizes = [1000] if args.smoke else [int(s) for s in args.sizes.split(",")]
    labels = list(SMOKE_METHODS if args.smoke else requests("", workflow(100)))  # every method
    times = 1 if args.smoke else args.times
    load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        results = run(sizes, labels, times)
    except RuntimeError as err:  # an editor client that ran but failed
        sys.exit(f"lsp_scale: {err}")
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"srpo-dsl lsp, median of {times} requests a method ({platform.machine()}, {load}; after: {after})")
    print("\n".join(table(sizes, results)))
    if len(sizes) > 1:
        worst = max(slope(sizes, [r[k] for r in per]) for per in results.values() for k in per[0])
        print(
            f"largest growth exponent over {len(labels) + 1} methods and {len(results)} clients: {worst:.2f}"
        )


if __name__ == "__main__":
    main()
