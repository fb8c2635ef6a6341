// srpo-dsl view: the episode list (filtered, one page at a time) and one episode's timeline.
// Reads the JSON in <script id="data">; builds every element with textContent (no HTML from data).
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("data").textContent);
  const episodes = data.episodes;
  const PAGE = 50;
  const state = { shown: [], page: 0, selected: -1 };
  const $ = (id) => document.getElementById(id);

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function fmt(x) {
    return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(3)) : String(x);
  }

  function shown(value) {
    return value === null || value === undefined ? "—" : typeof value === "string" ? value : JSON.stringify(value);
  }

  function summary() {
    let events = 0, incomplete = 0, total = 0;
    for (const ep of episodes) {
      events += ep.events.length;
      total += ep.return;
      for (const e of ep.events) if (!e.complete) incomplete += 1;
    }
    const mean = episodes.length ? total / episodes.length : 0;
    let text = `${episodes.length} episodes, ${events} events (${incomplete} incomplete), mean return ${fmt(mean)}`;
    if (data.objective) text += `; trained with ${data.objective}`;
    $("summary").textContent = text + ` — ${data.traces}`;
  }

  function filters() {
    const min = $("f-min").value === "" ? -Infinity : Number($("f-min").value);
    const max = $("f-max").value === "" ? Infinity : Number($("f-max").value);
    return {
      prompt: $("f-prompt").value.trim().toLowerCase(),
      min: min,
      max: max,
      invalid: $("f-invalid").value,
      type: $("f-type").value,
    };
  }

  function keep(ep, f) {
    if (f.prompt && !ep.prompt.toLowerCase().includes(f.prompt)) return false;
    if (ep.return < f.min || ep.return > f.max) return false;
    if (f.invalid === "with" && ep.invalid === 0) return false;
    if (f.invalid === "without" && ep.invalid > 0) return false;
    if (f.type && !ep.events.some((e) => e.type === f.type)) return false;
    return true;
  }

  function refilter() {
    const f = filters();
    state.shown = [];
    for (let i = 0; i < episodes.length; i += 1) if (keep(episodes[i], f)) state.shown.push(i);
    state.page = 0;
    for (const node of document.querySelectorAll(".graph [data-event-type]")) {
      node.classList.toggle("active", node.dataset.eventType === f.type);
    }
    renderList();
  }

  function renderList() {
    const pages = Math.max(1, Math.ceil(state.shown.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    const from = state.page * PAGE, to = Math.min(state.shown.length, from + PAGE);
    const body = document.querySelector("#episodes tbody");
    body.replaceChildren();
    for (const i of state.shown.slice(from, to)) body.appendChild(row(i));
    $("count").textContent = state.shown.length === episodes.length
      ? `${episodes.length} episodes`
      : `${state.shown.length} of ${episodes.length} episodes match`;
    $("page").textContent = `${state.shown.length ? from + 1 : 0}–${to} (page ${state.page + 1} of ${pages})`;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
  }

  function row(i) {
    const ep = episodes[i];
    const tr = el("tr", i === state.selected ? "selected" : "");
    tr.dataset.index = String(i);
    const cells = [ep.id, fmt(ep.return), fmt(ep.taskScore), shown(ep.answer), ep.invalid, ep.events.length, ep.cost[0]];
    for (const c of cells) tr.appendChild(el("td", "", c));
    if (ep.invalid > 0) tr.classList.add("has-invalid");
    tr.addEventListener("click", () => select(i));
    return tr;
  }

  function select(i) {
    state.selected = i;
    for (const tr of document.querySelectorAll("#episodes tbody tr")) {
      tr.classList.toggle("selected", Number(tr.dataset.index) === i);
    }
    renderEpisode(episodes[i]);
  }

  function renderEpisode(ep) {
    $("episode-title").textContent = `Episode ${ep.id}`;
    const box = $("timeline");
    box.replaceChildren();
    const head = `prompt ${ep.prompt} · sample ${ep.sample} · return ${fmt(ep.return)} · task score ${fmt(ep.taskScore)}` +
      ` · answer ${shown(ep.answer)} · invalid ${ep.invalid} · ${ep.cost[0]} tokens, ${ep.cost[1]} calls,` +
      ` ${ep.cost[2]} tool calls`;
    box.appendChild(el("p", "episode-head", head));
    const roles = Object.keys(ep.roleRewards);
    if (roles.length) {
      box.appendChild(el("p", "episode-head", "role returns: " + roles.map((r) => `${r} ${fmt(ep.roleRewards[r])}`).join(", ")));
    }
    if (ep.leaves.length) {
      box.appendChild(el("p", "episode-head", `a tree of ${ep.leaves.length} paths: ` +
        ep.leaves.map((l) => `${l[0]} return ${fmt(l[1])} answer ${shown(l[3])}`).join(" · ")));
    }
    ep.events.forEach((e, n) => box.appendChild(eventView(e, n)));
  }

  function eventView(e, n) {
    const sec = el("section", "event" + (e.complete ? "" : " incomplete"));
    sec.dataset.type = e.type;
    const head = el("div", "event-head");
    head.appendChild(el("span", "event-n", e.name || `e${n + 1}`));
    if (e.name !== undefined) {  // a branching episode: indent by the tree branches its path went through
      sec.style.marginLeft = `${24 * e.depth}px`;
      head.appendChild(el("span", "", `after ${e.after}`));
      if (e.alt) head.appendChild(el("span", "badge " + (e.alt.includes("pruned") ? "pruned" : "alt"), `alternative ${e.alt}`));
      if (e.ret !== null) head.appendChild(el("span", "badge", `return ${fmt(e.ret)}`));
    }
    head.appendChild(el("span", "event-type", e.type));
    head.appendChild(el("span", "", `node ${e.node} · state ${e.state.slice(0, 8)} · K ${e.members.length}` +
      (e.complete ? "" : ` of ${e.k} (incomplete: not trained)`)));
    if (e.adv) head.appendChild(el("span", "badge adv", `advantage ${advantageText(e.adv)}`));
    if (e.clip !== null && e.clip !== undefined) head.appendChild(clipBadge(e.clip));
    sec.appendChild(head);
    const members = el("div", "members");
    e.members.forEach((m, j) => members.appendChild(memberView(m, e.adv ? e.adv[j] : null)));
    sec.appendChild(members);
    if (e.obs.length) sec.appendChild(observations(e.obs));
    sec.appendChild(el("div", "transition", e.next));
    return sec;
  }

  function advantageText(adv) {
    const trained = adv.filter((a) => a !== null);  // null: a member not trained (trained = false)
    const same = trained.every((a) => a === trained[0]);
    return same ? fmt(trained[0]) : trained.map(fmt).join(" / ");
  }

  function clipBadge(clip) {
    const setwise = data.objective === "srpo" || data.objective === "seq";
    const text = setwise && (clip === 0 || clip === 1) ? (clip ? "ratio clipped" : "ratio not clipped")
      : `clipped ${(100 * clip).toFixed(1)}%`;
    return el("span", "badge " + (clip > 0 ? "clipped" : "unclipped"), text);
  }

  function memberView(m, adv) {
    const card = el("div", "member " + (m.valid ? "valid" : "invalid"));
    const head = el("div", "member-head");
    head.appendChild(el("strong", "", `${m.role}#${m.replica}`));
    head.appendChild(el("span", "", `${m.policy} v${m.version}`));
    head.appendChild(el("span", "validity", m.valid ? "valid" : "invalid"));
    if (m.action) head.appendChild(el("span", "action", `action ${m.action}`));
    head.appendChild(el("span", "", `${m.tokens} tokens`));
    if (adv !== null) head.appendChild(el("span", "", `A ${fmt(adv)}`));
    card.appendChild(head);
    const pre = el("pre", "text");
    if (m.hl) {
      pre.appendChild(document.createTextNode(m.text.slice(0, m.hl[0])));
      pre.appendChild(el("mark", "parsed", m.text.slice(m.hl[0], m.hl[1])));
      pre.appendChild(document.createTextNode(m.text.slice(m.hl[1])));
    } else {
      pre.textContent = m.text;
    }
    card.appendChild(pre);
    card.appendChild(el("div", "parsed-value", m.valid ? `parsed: ${shown(m.parsed)}` : "parsed: — (broke its contract)"));
    return card;
  }

  function observations(obs) {
    const list = el("ul", "observations");
    for (const o of obs) {
      const item = el("li", "", o.env !== undefined ? `${o.env} → ${o.agent}: ` : `${o.tool}(${shown(o.query)}) → `);
      if (o.documents) {
        item.appendChild(el("span", "", o.documents.map((d) => `[${d.id}] ${d.title}`).join("; ")));
      } else if (o.error !== undefined) {
        item.appendChild(el("span", "error", `error: ${o.error}`));
      } else {
        item.appendChild(el("span", "", shown(o.result)));
      }
      list.appendChild(item);
    }
    return list;
  }

  function setup() {
    for (const t of data.eventTypes) $("f-type").appendChild(el("option", "", t)).value = t;
    for (const id of ["f-prompt", "f-min", "f-max", "f-invalid", "f-type"]) {
      for (const kind of ["input", "change"]) $(id).addEventListener(kind, refilter);
    }
    $("filters").addEventListener("submit", (ev) => ev.preventDefault());
    $("prev").addEventListener("click", () => { state.page -= 1; renderList(); });
    $("next").addEventListener("click", () => { state.page += 1; renderList(); });
    for (const node of document.querySelectorAll(".graph [data-event-type]")) {
      node.addEventListener("click", () => {
        const type = node.dataset.eventType;
        $("f-type").value = $("f-type").value === type ? "" : type;
        refilter();
      });
    }
    summary();
    refilter();
    if (episodes.length) select(0);
  }

  setup();
})();
