"""The bench's Markdown tables: each part's header, printed as the part starts, and each case's row,
printed as the case ends (a case not done says why in its row: skipped, failed or stopped, with what it
had finished)."""

from __future__ import annotations

from typing import Any

GENERATORS = {  # the rollout part's generators, in the order they run: key -> label
    "hf_compiled": "srpo-dsl hf engine, decode compiled",
    "generate_static": "transformers generate (static cache; compiled on CUDA)",
    "generate": "transformers generate (dynamic cache)",
    "hf_static": "srpo-dsl hf engine, decode static",
    "hf_dynamic": "srpo-dsl hf engine, decode dynamic",
    "continuous_batching": "transformers generate_batch (continuous batching)",
}
DECODE_STATS = ("compile_s", "decode_shapes", "cache_bytes")  # `HFBackend.decode_stats()`, where it has it
COLUMNS = {  # part -> its table's columns (the first names the case)
    "rollout": ("generator", "first call s", "seconds", "generated tokens", "tokens/s"),
    "update": ("run", "steps", "step ms", "update ms", "update tokens/s", "MFU", "rollout tokens/s", "peak GiB"),
    "trl": ("run", "steps", "step ms", "generated tokens/s (whole step)"),
    "team": ("team", "steps", "step ms", "events/step", "mean K", "generated tokens/step", "peak GiB"),
    "async": ("team, one device", "steps", "steps/s", "vs sync", "mean staleness"),
}  # fmt: skip
COLUMNS["long"] = COLUMNS["update"]
STATS_COLUMNS = ("compile s", "decode shapes", "static caches GiB")  # the rollout table's, with DECODE_STATS


def columns(part: str, stats: bool = False) -> tuple[str, ...]:
    return COLUMNS[part] + (STATS_COLUMNS if part == "rollout" and stats else ())


def header(part: str, stats: bool = False) -> str:
    """The table's two header lines (`stats`: the rollout table's decode-statistics columns too)."""
    cols = columns(part, stats)
    return line(cols) + "\n|" + "|".join(["---", *["---:"] * (len(cols) - 1)]) + "|"


def line(cells: Any) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def row(part: str, label: str, record: dict[str, Any], stats: bool = False, base: float | None = None) -> str:
    """`record`'s row: its figures (a case that did not finish: those of its finished steps, then why it
    ended), or, without figures, its status and note (`base`: the async table's sync steps/s)."""
    width = len(columns(part, stats))
    if not (figures := record.get("figures")):
        cells = [f"{record['status']}: {record.get('note', '')}".rstrip(": ")]
    else:
        cells = CELLS[part](figures, stats, base)
        if record["status"] != "done":
            cells[0] = f"{cells[0]}, then {record['status']}: {record.get('note', '')}"
    return line([label, *cells, *[""] * (width - 1 - len(cells))])


def steps_cell(f: dict[str, Any]) -> str:
    """The steps a trained case finished, "k of n" when it did not finish its n."""
    return f"{f['steps']}" if f["steps"] >= f.get("planned", 0) else f"{f['steps']} of {f['planned']}"


def number(value: float | None, form: str) -> str:
    return "n/a" if value is None else format(value, form)


def rollout_cells(f: dict[str, Any], stats: bool, _base: float | None) -> list[str]:
    cells = [
        f"{f['first_seconds']:.2f}",
        f"{f['seconds']:.2f}",
        f"{f['tokens']}",
        f"{f['tokens_per_s']:,.0f}",
    ]
    if stats and "compile_s" in f:
        cells += [f"{f['compile_s']:.1f}", f"{f['decode_shapes']}", f"{f['cache_bytes'] / 2**30:.2f}"]
    return cells


def update_cells(f: dict[str, Any], _stats: bool, _base: float | None) -> list[str]:
    mfu = "n/a" if f["mfu"] is None else f"{100 * f['mfu']:.1f}%"
    return [steps_cell(f), f"{f['step_ms']:.0f}", f"{f['update_ms']:.0f}", f"{f['update_tokens_per_s']:,.0f}",
            mfu, f"{f['rollout_tokens_per_s']:,.0f}", number(f["peak_gib"], ".1f")]  # fmt: skip


def trl_cells(f: dict[str, Any], _stats: bool, _base: float | None) -> list[str]:
    return [steps_cell(f), f"{f['step_ms']:.0f}", f"{f['tokens_per_s']:,.0f}"]


def team_cells(f: dict[str, Any], _stats: bool, _base: float | None) -> list[str]:
    return [steps_cell(f), f"{f['step_ms']:.0f}", f"{f['events']:.0f}", f"{f['mean_k']:.2f}",
            f"{f['tokens_per_step']:,.0f}", number(f["peak_gib"], ".1f")]  # fmt: skip


def async_cells(f: dict[str, Any], _stats: bool, base: float | None) -> list[str]:
    rate = f["steps_per_s"]
    versus = f"{rate / base:.2f}×" if rate is not None and base else "—"
    return [steps_cell(f), number(rate, ".3f"), versus, number(f["staleness"], ".2f")]


CELLS = {"rollout": rollout_cells, "update": update_cells, "long": update_cells, "trl": trl_cells,
         "team": team_cells, "async": async_cells}  # fmt: skip


def rollout_ratios(records: dict[str, dict[str, Any]]) -> list[str]:
    """Each engine loop's tokens/s against `generate` with either cache, where both were measured."""
    done = {k: r["figures"]["tokens_per_s"] for k, r in records.items() if r["status"] == "done"}
    return [
        f"{GENERATORS[mode]} / {GENERATORS[base]}: {done[mode] / done[base]:.2f}×"
        for mode in ("hf_compiled", "hf_static", "hf_dynamic")
        for base in ("generate_static", "generate")
        if mode in done and base in done
    ]
