"""How fast `srpo-dsl lsp` answers an edit: the time from didChange to publishDiagnostics, and in a
real editor (headless Neovim) from a buffer edit to its diagnostics.

    python bench/lsp_bench.py            # every shipped workflow, 15 edits each: median and max (ms)
    python bench/lsp_bench.py --nvim-edits 0    # without Neovim
    python bench/lsp_bench.py --smoke    # a check that it runs: one workflow, one edit of each kind

The JSON-RPC client of bench/lsp_client.py over the server's stdio, as an editor speaks to it:
it opens each workflow, then replaces its text with an edit at a time (a comment appended) and
waits for the diagnostics the server publishes for it (the time includes the 20 ms the server
waits for more changes before it analyses: srpo_dsl/lsp/documents.py). The same client drives
the language server's tests (tests/lsp/).

Then, where `nvim` is installed, Neovim itself runs headless with editors/neovim/srpo.lua
(editors/neovim/test/driver.lua scripts it): per workflow, edits with nvim_buf_set_lines, each
timed until the diagnostics the server published for that buffer version have been handed to
vim.diagnostic. Once after a pause (longer than the client's 150 ms debounce, so the edit is sent
at once), once back to back as in typing (the client holds each change up to its debounce).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lsp_client import ROOT, SERVER, LspClient

NVIM_PLUGIN = ROOT / "editors" / "neovim" / "srpo.lua"
NVIM_DRIVER = ROOT / "editors" / "neovim" / "test" / "driver.lua"


def change_latencies(client: LspClient, paths: list[Path], edits: int) -> dict[str, list[float]]:
    """Per workflow, the seconds from each of `edits` didChange notifications to its diagnostics."""
    out = {}
    for path in paths:
        text = path.read_text(encoding="utf-8")
        uri = client.open(path, text)
        client.diagnostics(uri)
        times = []
        for version in range(2, edits + 2):
            start = time.perf_counter()
            client.replace(uri, text + f"# edit {version}\n", version)
            client.diagnostics(uri)
            times.append(time.perf_counter() - start)
        out[path.name] = times
    return out


def run_nvim(job: dict, nvim: str = "nvim", timeout: float = 120) -> dict:
    """Headless Neovim (the program `nvim`) running editors/neovim/test/driver.lua on `job` (its
    scenario and files; editors/neovim/srpo.lua and this checkout's server unless the job names
    others); the driver's JSON report. Neovim's state, cache and data folders are temporary."""
    with tempfile.TemporaryDirectory(prefix="srpo-nvim-") as tmp:
        spec, out = Path(tmp) / "job.json", Path(tmp) / "report.json"
        spec.write_text(json.dumps({"plugin": str(NVIM_PLUGIN), "cmd": SERVER, **job, "out": str(out)}))
        xdg = {f"XDG_{kind}_HOME": str(Path(tmp) / kind.lower()) for kind in ("STATE", "CACHE", "DATA")}
        env = {**os.environ, **xdg, "PYTHONPATH": str(ROOT), "SRPO_NVIM_DRIVER": str(spec)}
        cmd = [nvim, "--headless", "--clean", "-n", "-u", str(NVIM_DRIVER)]
        done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=timeout)
        if not out.exists():
            raise RuntimeError(f"nvim wrote no report (exit {done.returncode}): {done.stderr[-2000:]}")
        return json.loads(out.read_text())


def nvim_latencies(
    paths: list[Path], edits: int, pause: float = 0.3, nvim: str = "nvim"
) -> tuple[str, dict[str, dict[str, list[float]]]]:
    """Neovim's version and, per workflow, the seconds from each buffer edit to its diagnostics in
    Neovim: `pause` (each edit `pause` seconds after the last) and `typing` (back to back)."""
    job = {"scenario": "latency", "paths": list(map(str, paths)), "edits": edits, "pause_ms": pause * 1e3}
    report = run_nvim(job, nvim, timeout=60 + len(paths) * edits * (pause + 1))
    if report.get("failure"):
        raise RuntimeError(f"Neovim {report['nvim']}: {report['failure']}")
    seconds = {
        name: {kind: [ms / 1e3 for ms in times] for kind, times in runs.items()}
        for name, runs in report["latency"].items()
    }
    return report["nvim"], seconds


def table(
    latencies: dict[str, list[float]], nvim: dict[str, dict[str, list[float]]] | None = None
) -> list[str]:
    """A markdown table: per workflow its lines and the median and max latency in ms; with `nvim`,
    the medians in Neovim after a pause and while typing."""
    head = "| workflow | lines | median (ms) | max (ms) |"
    rule = "|---|---:|---:|---:|"
    if nvim:
        head += " Neovim, after a pause (ms) | Neovim, typing (ms) |"
        rule += "---:|---:|"
    lines = [head, rule]
    for name, times in latencies.items():
        n = len((ROOT / "workflows" / name).read_text(encoding="utf-8").splitlines())
        row = f"| {name} | {n} | {statistics.median(times) * 1e3:.1f} | {max(times) * 1e3:.1f} |"
        if nvim:
            row += "".join(f" {statistics.median(nvim[name][k]) * 1e3:.1f} |" for k in ("pause", "typing"))
        lines.append(row)
    return lines


def summary(label: str, per_workflow: list[list[float]]) -> str:
    medians = [statistics.median(t) * 1e3 for t in per_workflow]
    return (
        f"{label} over {len(medians)} workflows: median of medians {statistics.median(medians):.1f} ms, "
        f"worst {max(medians):.1f} ms"
    )


def show(latencies: dict[str, list[float]], nvim: dict | None, version: str | None, why: str) -> None:
    """Print the table and the summaries (`why`: why Neovim was skipped, where it was)."""
    load = "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    cpu = platform.processor() or platform.machine()
    print(f"srpo-dsl lsp, didChange -> publishDiagnostics ({cpu}, {load})")
    print("\n".join(table(latencies, nvim)))
    print(summary("didChange -> publishDiagnostics", list(latencies.values())))
    if nvim is None:
        print(f"Neovim: skipped ({why})")
        return
    for kind, what in (("pause", "an edit after a pause"), ("typing", "edits back to back")):
        label = f"Neovim {version}, {what}: buffer edit -> diagnostics"
        print(summary(label, [t[kind] for t in nvim.values()]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=15, help="edits per workflow")
    ap.add_argument("--nvim-edits", type=int, default=5, help="Neovim: edits per workflow and kind (0: none)")
    ap.add_argument("--pause", type=float, default=0.3, help="Neovim: seconds before each paused edit")
    ap.add_argument("--nvim", default="nvim", help="the Neovim program")
    ap.add_argument("--smoke", action="store_true", help="a check that it runs: one workflow, one edit each")
    args = ap.parse_args()
    paths = sorted((ROOT / "workflows").glob("*.srpo"))
    if args.smoke:
        paths, args.edits, args.nvim_edits = paths[:1], 1, 1
    client = LspClient()
    try:
        client.initialize(ROOT)
        latencies = change_latencies(client, paths, args.edits)
    finally:
        client.close()
    nvim, version, why = None, None, "--nvim-edits 0"
    if args.nvim_edits > 0 and shutil.which(args.nvim) is None:
        why = f"{args.nvim} is not installed"
    elif args.nvim_edits > 0:
        version, nvim = nvim_latencies(paths, args.nvim_edits, args.pause, args.nvim)
    show(latencies, nvim, version, why)


if __name__ == "__main__":
    main()
