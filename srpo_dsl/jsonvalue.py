"""The types of what JSON holds: a run's metrics, its config and its traces, read back or about to be
written. `json.loads` returns `Any`; a reader annotates what it got as a `JsonValue` (or a `JsonObject`
where the file's format says so) and narrows it before use."""

from __future__ import annotations

from typing import TypeAlias, Union

JsonValue: TypeAlias = Union[bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"], None]  # noqa: UP007
JsonObject: TypeAlias = dict[str, JsonValue]
