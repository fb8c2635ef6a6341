"""The `--overwrite` option; the results-folder rule itself is `srpo_dsl.api.outputs`."""

from __future__ import annotations

import typer

OVERWRITE = typer.Option(
    False, "--overwrite", help="Replace the --out folder if it exists (once the new results are complete)."
)
