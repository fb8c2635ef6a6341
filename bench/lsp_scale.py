"""How each request of `srpo-dsl lsp` grows with the file: the quickstart workflow with its steps
repeated (in loops, so it still checks) to 1,000, 5,000 and 20,000 lines; per method the median time
of a few requests, and the growth exponent fitted to them (the slope of log time on log lines: 1 is
linear, 2 quadratic).

    python bench/lsp_scale.py                 # 1k, 5k and 20k lines, 5 requests a method
    python bench/lsp_scale.py --smoke         # a check that it runs: 200 and 400 lines, one each

The same client as bench/lsp_bench.py (JSON-RPC over the server's stdio). "diagnostics" is the time
from a didChange to its publishDiagnostics (20 ms of it the server waiting for more changes).
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
from lsp_bench import ROOT, LspClient

QUICKSTART = ROOT / "workflows" / "quickstart.srpo"
LOOP = "repeat at most 2 {\n    parallel solver\n    verify verifier\n}\n"
STEPS_AT = "parallel solver "  # where the quickstart's steps start


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


def measure(client: LspClient, folder: Path, lines: int, times: int) -> dict[str, float]:
    """Median seconds per method on a workflow of `lines` lines (opened in `folder`)."""
    text = workflow(lines)
    path = folder / f"big{lines}.srpo"
    path.write_text(text, encoding="utf-8")
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
    for label, (method, params) in requests(uri, text).items():
        out[label] = _median(lambda m=method, p=params: client.request(m, p), times)
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return out


def slope(sizes: list[int], seconds: list[float]) -> float:
    """The least-squares slope of log(seconds) on log(sizes)."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-6)) for t in seconds]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def table(sizes: list[int], results: list[dict[str, float]]) -> list[str]:
    head = "| method | " + " | ".join(f"{s:,} lines (ms)" for s in sizes) + " | growth exponent |"
    out = [head, "|---|" + "---:|" * (len(sizes) + 1)]
    for label in results[0]:
        row = [results[i][label] for i in range(len(sizes))]
        cells = " | ".join(f"{t * 1e3:.1f}" for t in row)
        out.append(f"| {label} | {cells} | {slope(sizes, row):.2f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,20000", help="lines of the workflows, comma-separated")
    ap.add_argument("--times", type=int, default=5, help="requests a method and size (the median is shown)")
    ap.add_argument("--smoke", action="store_true", help="a check that it runs: 200 and 400 lines, one each")
    args = ap.parse_args()
    sizes = [200, 400] if args.smoke else [int(s) for s in args.sizes.split(",")]
    times = 1 if args.smoke else args.times
    folder = Path(tempfile.mkdtemp(prefix="srpo-lsp-scale-"))
    shutil.copytree(ROOT / "workflows" / "quickstart", folder / "quickstart")
    client = LspClient()
    try:
        client.initialize(folder)
        results = [measure(client, folder, s, times) for s in sizes]
    finally:
        client.close()
        shutil.rmtree(folder)
    load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"srpo-dsl lsp, median of {times} requests a method ({platform.machine()}, {load})")
    print("\n".join(table(sizes, results)))
    worst = max(slope(sizes, [r[k] for r in results]) for k in results[0])
    print(f"largest growth exponent over {len(results[0])} methods: {worst:.2f}")


if __name__ == "__main__":
    main()
