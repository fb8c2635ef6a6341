"""What the README's set-up and its table of shipped workflows say, checked against the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_every_torch_install_the_readme_writes_names_pytorchs_cpu_index() -> None:
    """Outside a machine with the CPU wheel on disk, `pip install torch` from PyPI is the CUDA build."""
    installs = re.findall(r"pip install torch\S*[^&\n`]*", README)
    assert len(installs) >= 2  # the quickstart's command and the tests'
    for install in installs:
        assert CPU_INDEX in install, install


def test_ci_installs_the_readmes_torch_version() -> None:
    """.ci/run installs torch from the CI machine's disk (no index): the version the README names."""
    (version,) = set(re.findall(r"pip install torch==(\S+)", README))
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"pip install -q --no-compile torch=={version}\n" in run
    assert (ROOT / ".ci" / "constraints.txt").read_text(encoding="utf-8").split() == [f"torch=={version}"]


def test_the_readmes_table_of_shipped_workflows_lists_every_workflow() -> None:
    section = README.split("## Shipped workflows", 1)[1].split("\n## ", 1)[0]
    listed = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            listed.update(re.findall(r"`([\w.-]+\.srpo)`", row.split(" | ")[0]))
    shipped = {path.name for path in (ROOT / "workflows").glob("*.srpo")}
    assert sorted(shipped - listed) == [], "shipped but not in the README's table"
    assert sorted(listed - shipped) == [], "in the README's table but not shipped"
