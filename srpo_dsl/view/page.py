"""One self-contained HTML page: our CSS and JavaScript inlined (assets/), the graph and the curves as
inline SVG (the curves: the figures of `rl.loop.figures`, which `plot` saves as PNG), the episodes as
JSON in a `<script type="application/json">` tag that the page renders one page of episodes at a time."""

from __future__ import annotations

import json
from html import escape
from importlib import resources

from srpo_dsl.rl.loop.figures import panels, svg_text
from srpo_dsl.runfolder import EVAL, RunError, current_keys, dynamics_of, eval_curve
from srpo_dsl.view.episodes import episode_json
from srpo_dsl.view.graph_svg import graph_svg
from srpo_dsl.view.source import Source, ViewError

TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style></head>
<body>
<header><h1>{title}</h1><p id="summary"></p><ul id="notes">{notes}</ul></header>
<main>
<section id="overview">
  <div id="graph-panel"><h2>Event graph</h2>{graph}</div>
  {curves}
</section>
<section id="browser">
  <div id="list-panel">
    <h2>Episodes</h2>
    <form id="filters" autocomplete="off">
      <label>prompt <input id="f-prompt" type="search" placeholder="prompt id contains"></label>
      <label>return ≥ <input id="f-min" type="number" step="any"></label>
      <label>return ≤ <input id="f-max" type="number" step="any"></label>
      <label>invalid outputs <select id="f-invalid">
        <option value="">any</option><option value="with">some</option><option value="without">none</option>
      </select></label>
      <label>event type <select id="f-type"><option value="">any</option></select></label>
    </form>
    <p id="count"></p>
    <table id="episodes"><thead><tr><th>episode</th><th>return</th><th>task score</th><th>answer</th>
      <th>invalid</th><th>events</th><th>tokens</th></tr></thead><tbody></tbody></table>
    <nav id="pager"><button id="prev" type="button">◀ previous</button><span id="page"></span>
      <button id="next" type="button">next ▶</button></nav>
  </div>
  <div id="episode-panel"><h2 id="episode-title">Episode</h2><div id="timeline">
    <p class="hint">Choose an episode in the list.</p></div></div>
</section>
</main>
<script id="data" type="application/json">{data}</script>
<script>{js}</script>
</body></html>
"""


def asset(name: str) -> str:
    return resources.files("srpo_dsl.view").joinpath("assets", name).read_text(encoding="utf-8")


def script_json(data: object) -> str:
    """JSON safe inside a <script> element: no `<` at all (so no `</script>` or `<!--`)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def curves(source: Source) -> list[str]:
    """The run's curve figures (`figures.panels`, the same as `srpo-dsl plot`'s PNGs) as inline SVG. An
    older run's metrics read under the keys of today (`current_keys`)."""
    rows, evals = [current_keys(r) for r in source.metrics], source.evals
    if not rows and not evals:
        return []
    try:
        curve = eval_curve(evals, source.traces.parent / EVAL) if evals else None
        shown = panels(dynamics_of(rows, curve))
    except RunError as exc:  # eval.jsonl's rows, named by the reader
        raise ViewError(str(exc)) from None
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # (OverflowError: a step of 1e400)
        raise ViewError(
            f"{source.traces.parent}: not a training run's metrics ({type(exc).__name__}: {exc})"
        ) from None
    return [svg_text(panel) for panel in shown]


def event_types(source: Source) -> list[str]:
    """The graph's event types in compile order, then any other type the traces hold."""
    known = (
        [d["event_type"] for _, d in source.graph.nodes(data=True) if "event_type" in d]
        if source.graph
        else []
    )
    seen = dict.fromkeys(e.event_type for ep in source.episodes for e in ep.events)
    return list(dict.fromkeys([*known, *seen]))


def page_data(source: Source) -> dict[str, object]:
    options = (source.config or {}).get("options")
    return {
        "traces": str(source.traces),
        "objective": options.get("objective") if isinstance(options, dict) else None,
        "eventTypes": event_types(source),
        "episodes": [episode_json(source.graph, ep) for ep in source.episodes],
    }


def render_page(source: Source, title: str) -> str:
    counts: dict[str, int] = {}
    for ep in source.episodes:
        for e in ep.events:
            counts[e.event_type] = counts.get(e.event_type, 0) + 1
    graph = graph_svg(source.graph, counts) if source.graph is not None else '<p class="hint">no graph</p>'
    charts = curves(source)
    panel = '<div id="curves-panel"><h2>Training curves</h2>' + "".join(charts) + "</div>" if charts else ""
    return TEMPLATE.format(
        title=escape(title),
        css=asset("viewer.css"),
        notes="".join(f"<li>{escape(n)}</li>" for n in source.notes),
        graph=graph,
        curves=panel,
        data=script_json(page_data(source)),
        js=asset("viewer.js"),
    )
