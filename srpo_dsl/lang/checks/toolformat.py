"""A policy's `tool_format` against its model's chat template, where the model is a local folder: the
template must write the format's calls (`schema.TOOL_FORMAT_MARKERS`), or the model was not trained on it
(E018). A model named by repo id is not looked up (nothing is read from the network or the cache)."""

from __future__ import annotations

import json
from pathlib import Path

from srpo_dsl.lang.checks.schema import TOOL_FORMAT_MARKERS, ToolFormat


def chat_template_of(folder: Path) -> str | None:
    """The chat template(s) a tokenizer folder holds (`chat_template.jinja`, else `tokenizer_config.json`'s
    `chat_template`: one text, or named ones joined), None for none or a file that cannot be read."""
    try:
        if (folder / "chat_template.jinja").is_file():
            return (folder / "chat_template.jinja").read_text(encoding="utf-8")
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    found = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(found, list):  # named templates: [{"name": ..., "template": ...}]
        return "\n".join(str(t.get("template", "")) for t in found if isinstance(t, dict))
    return found if isinstance(found, str) else None


def tool_format_problem(
    model: str, base: Path, tool_format: ToolFormat, given: str | None = None
) -> str | None:
    """Why `tool_format` does not fit the chat template `given` (the policy's `chat_template`), else the one
    of the local model `model` (relative to `base`); None when it fits or there is no template to read."""
    folder = Path(model) if Path(model).is_absolute() else base / model
    template = given if given is not None else chat_template_of(folder) if folder.is_dir() else None
    if template is None:
        return None
    marker = TOOL_FORMAT_MARKERS[tool_format]
    if marker in template:
        return None
    whose = "the policy's `chat_template`" if given is not None else f"the chat template of `{model}`"
    return f"`tool_format = {tool_format}`: {whose} never writes `{marker}`"
