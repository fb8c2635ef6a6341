"""textDocument/signatureHelp in a `"file.py:function"` reference: how srpo-dsl calls the function
there (`USES`: the parameters each hook kind receives), with the user's `def` when it can be read."""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp

from srpo_dsl.lang.usercode.pycode import USES
from srpo_dsl.lsp.paths import hook_use, open_string
from srpo_dsl.lsp.pyrefs import describe, locate

_PARAMS = re.compile(r"\(([^)]*)\)")


def _parameters(shape: str) -> list[lsp.ParameterInformation]:
    """The parameters a call shape lists (`reward(answer, row[, episode])`: answer, row, episode)."""
    inside = _PARAMS.search(shape)
    words = inside.group(1).replace("[", "").replace("]", "").split(",") if inside else []
    return [lsp.ParameterInformation(label=w.strip()) for w in words if w.strip()]


def signature_help(line: str, character: int, path: str) -> lsp.SignatureHelp | None:
    """The call a reference under the cursor receives; None outside one."""
    found = open_string(line[:character])
    if found is None:
        return None
    opener, written = found
    end = line.find(opener[-1], character)
    use = hook_use(opener)
    if use is None:
        return None
    whole = written + (line[character:end] if end >= 0 else "")
    target = locate(whole, str(Path(path))) if ":" in whole else None
    doc = describe(target) if target is not None else f"how srpo-dsl calls a `{use}` function"
    sig = lsp.SignatureInformation(
        label=USES[use].shape,
        documentation=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=doc),
        parameters=_parameters(USES[use].shape),
    )
    return lsp.SignatureHelp(signatures=[sig], active_signature=0)
