"""The two real editor clients of bench/lsp_scale.py, each timing the same requests on the same files
as the raw stdio client: Neovim headless with editors/neovim/srpo.lua (editors/neovim/test/driver.lua's
`scale` scenario, wall time by vim.loop.hrtime inside Neovim), and VS Code's extension.js with
vscode-languageclient under node (editors/vscode/test/scale.js, client.sendRequest). Each gives, per
file name and method label, the seconds of each request; or None and why it could not run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from lsp_bench import ROOT, SERVER, run_nvim

VSCODE = ROOT / "editors" / "vscode"
NVIM = os.environ.get("SRPO_DSL_NVIM", "nvim")

Timings = dict[str, dict[str, list[float]]]  # file name -> method label -> seconds of each request


def _seconds(report: dict[str, dict[str, list[float]]]) -> Timings:
    return {
        name: {label: [ms / 1e3 for ms in runs] for label, runs in per.items()}
        for name, per in report.items()
    }


def missing(client: str) -> str | None:
    """Why `client` ("Neovim" or "VS Code client") cannot run here, or None."""
    if client == "Neovim":
        return None if shutil.which(NVIM) else f"`{NVIM}` is not installed (Debian: apt-get install neovim)"
    if not shutil.which("node"):
        return "node is not installed"
    if not (VSCODE / "node_modules").is_dir():
        return "editors/vscode has no node_modules (run `npm ci` there)"
    return None


def neovim(paths: list[Path], requests: dict[str, list[dict]], times: int) -> Timings:
    """Neovim's seconds per file and method: `times` edits to their diagnostics, `times` of each request."""
    job = {"scenario": "scale", "paths": list(map(str, paths)), "requests": requests, "times": times}
    report = run_nvim(job, NVIM, timeout=120 + 60 * len(paths) * times)
    if report.get("failure"):
        raise RuntimeError(f"Neovim {report['nvim']}: {report['failure']}")
    return _seconds(report["scale"])


def vscode(paths: list[Path], requests: dict[str, list[dict]], times: int) -> Timings:
    """The VS Code client's seconds per file and method, as neovim() measures them."""
    with tempfile.TemporaryDirectory(prefix="srpo-vscode-") as tmp:
        spec = Path(tmp) / "job.json"
        spec.write_text(json.dumps({"paths": list(map(str, paths)), "requests": requests, "times": times}))
        cmd = ["node", "test/scale.js", str(spec), "--", *SERVER]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run(
            cmd, cwd=VSCODE, env=env, capture_output=True, text=True, timeout=120 + 60 * len(paths) * times
        )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"test/scale.js printed no report (exit {done.returncode}): {done.stderr[-2000:]}"
        ) from None
    if report["failure"]:
        raise RuntimeError(f"VS Code client: {report['failure']}")
    return _seconds(report["scale"])


RUN = {"Neovim": neovim, "VS Code client": vscode}  # client -> how it is run
