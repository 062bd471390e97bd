// gen_agent observer: renders the view pushed over server-sent events; no framework.
"use strict";
(function () {
  const token = new URLSearchParams(location.search).get("token") || "";
  const $ = (id) => document.getElementById(id);
  const esc = (value) => String(value === null || value === undefined ? "" : value)
    .replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;",
                                   "'": "&#39;" })[c]);
  const slug = (value) => String(value).replace(/[^A-Za-z0-9_-]/g,
    (c) => "_" + c.charCodeAt(0).toString(16));
  const ms = (value) => value === null || value === undefined ? "–"
    : value < 1000 ? value + " ms" : (value / 1000).toFixed(1) + " s";
  const num = (value) => value === null || value === undefined ? "–" : String(value);
  const cost = (value) => value === null || value === undefined ? "–" : "$" + value.toFixed(4);
  const clock = (seconds) => {
    const d = new Date(seconds * 1000);
    return d.toLocaleTimeString([], { hour12: false }) + "." +
      String(d.getMilliseconds()).padStart(3, "0");
  };
  const disabled = token ? "" : " disabled title=\"open the URL with its token to act\"";

  function button(action, label, data, danger) {
    const attrs = Object.entries(data).map(([k, v]) => ` data-${k}="${esc(v)}"`).join("");
    const id = ["act", action, ...Object.values(data).map(slug)].join("-");
    return `<button type="button" id="${id}" data-action="${action}"${attrs}` +
      `${danger ? ' class="danger"' : ""}${disabled}>${label}</button>`;
  }

  function outcome(text) {
    return `<span class="${text === "ok" ? "ok" : "bad"}">${esc(text)}</span>`;
  }

  function tree(sup) {
    const children = sup.children.map((c) => {
      const state = c.running ? "running" : "stopped";
      const nested = c.supervisor ? tree(c.supervisor) : "";
      return `<li id="child-${slug(sup.name)}-${slug(c.id)}" data-child="${esc(c.id)}" ` +
        `data-restarts="${c.restarts}" data-running="${c.running}">` +
        `<strong>${esc(c.id)}</strong>` +
        `<span class="badge phase-${c.running ? "idle" : "stopped"}">${state}</span>` +
        `<span class="muted">${esc(c.type)}, ${esc(c.restart)}</span>` +
        `<span class="restarts">restarts ${c.restarts}</span>` +
        (c.last_exit ? `<span class="muted">last exit ${esc(c.last_exit)}</span>` : "") +
        button("restart_child", "Restart", { supervisor: sup.name, child: c.id }, true) +
        nested + "</li>";
    }).join("");
    return `<div class="tree" id="sup-${slug(sup.name)}" data-supervisor="${esc(sup.name)}" ` +
      `data-intensity-left="${sup.intensity_left}">` +
      `<h3>${esc(sup.name)}${sup.pool ? ` <span class="muted">of pool ${esc(sup.pool)}</span>` : ""}` +
      `<span class="badge">${esc(sup.strategy)}</span>` +
      `<span class="intensity">intensity left ${sup.intensity_left}/${sup.max_restarts} ` +
      `per ${sup.max_seconds} s</span></h3>` +
      `<ul class="children">${children || "<li class=\"empty\">no child</li>"}</ul></div>`;
  }

  function agentBody(a) {
    const flags = [a.halted && "halted", a.halt_pending && "halt pending",
                   a.draining && "draining"].filter(Boolean)
      .map((f) => `<span class="badge flag">${f}</span>`).join("");
    const cur = a.current;
    const current = cur ? `${esc(cur.origin)}, attempt ${cur.attempt}, ${ms(cur.elapsed_ms)}` +
      ` of ${cur.watchdog_ms === null ? "no watchdog" : ms(cur.watchdog_ms)}` : "none";
    const turns = a.turns.length ? `<div class="scroll"><table><thead><tr><th>outcome</th>` +
      `<th>duration</th><th>tokens in/out</th><th>cost</th></tr></thead><tbody>` +
      a.turns.map((t) => `<tr><td>${outcome(t.outcome)}</td><td>${ms(t.duration_ms)}</td>` +
        `<td>${num(t.input_tokens)}/${num(t.output_tokens)}</td><td>${cost(t.cost_usd)}</td>` +
        `</tr>`).join("") + "</tbody></table></div>" : "<p class=\"empty\">no turn yet</p>";
    return `<h3>${esc(a.name)}<span class="badge phase phase-${esc(a.phase)}">` +
      `${esc(a.phase)}</span>${flags}</h3><dl>` +
      `<dt>queue</dt><dd class="queue">${num(a.pending_prompts)}</dd>` +
      `<dt>notifications</dt><dd>${num(a.pending_notifications)}</dd>` +
      `<dt>supervisor</dt><dd>${esc(a.supervisor || "none")}</dd>` +
      `<dt>current</dt><dd class="current">${current}</dd></dl>${turns}`;
  }

  function agentActions(a) {
    const data = { agent: a.name };
    return `${button("interrupt", "Interrupt", data)}${button("halt", "Halt", data)}` +
      `${button("resume", "Resume", data)}${button("stop", "Stop", data, true)}`;
  }

  // One card per agent, kept across views: only its body is redrawn, so its buttons (and
  // the keyboard focus on them) stay put while the turn's elapsed time moves.
  const bodies = new Map();
  function renderAgents(list) {
    const box = $("agents");
    const ids = list.map((a) => "agent-" + slug(a.name));
    for (const el of [...box.children]) {
      if (!ids.includes(el.id)) {
        bodies.delete(el.id);
        el.remove();
      }
    }
    if (!list.length) {
      box.innerHTML = "<p class=\"empty\">No agent.</p>";
      return;
    }
    list.forEach((a, i) => {
      let card = $(ids[i]);
      if (!card) {
        card = document.createElement("article");
        card.className = "card";
        card.id = ids[i];
        card.dataset.agent = a.name;
        card.innerHTML = `<div class="body"></div><div class="actions">${agentActions(a)}</div>`;
      }
      if (box.children[i] !== card) box.insertBefore(card, box.children[i] || null);
      card.dataset.phase = a.phase;
      const body = agentBody(a);
      if (bodies.get(card.id) !== body) {
        card.firstElementChild.innerHTML = body;
        bodies.set(card.id, body);
      }
    });
  }

  function pool(p) {
    const rows = p.workers.map((w) => `<tr><td>${esc(w.name)}</td>` +
      `<td>${w.alive ? "alive" : "down"}${w.retiring ? ", retiring" : ""}</td>` +
      `<td>${w.in_flight}</td><td>${w.queued}</td><td>${w.dispatched}</td>` +
      `<td>${w.completed}</td></tr>`).join("");
    return `<div class="tree" id="pool-${slug(p.name)}" data-pool="${esc(p.name)}">` +
      `<h3>${esc(p.name)}<span class="badge">${esc(p.routing)}</span></h3>` +
      `<dl><dt>workers</dt><dd>${p.size}</dd><dt>queued</dt><dd class="queued">${p.queued}</dd>` +
      `<dt>in flight</dt><dd class="in-flight">${p.in_flight}</dd></dl>` +
      `<div class="scroll"><table><thead><tr><th>worker</th><th>state</th><th>in flight</th>` +
      `<th>queued</th><th>dispatched</th><th>completed</th></tr></thead>` +
      `<tbody>${rows}</tbody></table></div></div>`;
  }

  function turns(view) {
    if (!view.turns.length) return "<p class=\"empty\">No turn yet.</p>";
    const prompt = view.show_text;
    return `<table><thead><tr><th>ended</th><th>agent</th><th>origin</th><th>attempt</th>` +
      `<th>outcome</th><th>duration</th><th>tokens in/out</th><th>cost</th>` +
      `${prompt ? "<th>prompt</th>" : ""}</tr></thead><tbody>` +
      view.turns.map((t) => `<tr><td>${clock(t.ended)}</td><td>${esc(t.agent)}</td>` +
        `<td>${esc(t.origin)}</td><td>${t.attempt}</td><td>${outcome(t.outcome)}</td>` +
        `<td>${ms(t.duration_ms)}</td><td>${num(t.input_tokens)}/${num(t.output_tokens)}</td>` +
        `<td>${cost(t.cost_usd)}</td>` +
        `${prompt ? `<td class="prompt">${esc(t.prompt)}</td>` : ""}</tr>`).join("") +
      "</tbody></table>";
  }

  function events(view) {
    return view.events.map((e) => `<li><time>${clock(e.t)}</time><strong>${esc(e.agent)}` +
      `</strong> ${esc(e.event)} <span class="muted">${esc(e.detail)}</span></li>`).join("");
  }

  // -- charts: small inline SVG, one row per scope (all, each host, the busiest agents) ----
  const W = 150, H = 36;
  function bars(values, css) {
    const top = Math.max(...values, 0);
    const w = W / values.length;
    return values.map((v, i) => {
      const h = top > 0 ? Math.max(v > 0 ? 1 : 0, (v / top) * (H - 2)) : 0;
      return h ? `<rect class="${css}" x="${(i * w).toFixed(1)}" y="${(H - h).toFixed(1)}" ` +
        `width="${Math.max(1, w - 1).toFixed(1)}" height="${h.toFixed(1)}"></rect>` : "";
    }).join("");
  }
  function lines(series) {
    const all = series.flatMap((s) => s.values.filter((v) => v !== null));
    const top = Math.max(...all, 0);
    const w = W / series[0].values.length;
    return series.map((s) => {
      const points = s.values.map((v, i) => v === null ? null
        : `${(i * w + w / 2).toFixed(1)},${(H - 1 - (top > 0 ? v / top : 0) * (H - 3)).toFixed(1)}`)
        .filter(Boolean);
      if (points.length === 1) {
        const [x, y] = points[0].split(",");
        return `<circle class="${s.css}" cx="${x}" cy="${y}" r="1.8"></circle>`;
      }
      return points.length ? `<polyline class="${s.css}" points="${points.join(" ")}"></polyline>` : "";
    }).join("");
  }
  function chart(metric, label, summary, body, sum) {
    return `<figure class="chart"><svg class="m-${metric}" data-metric="${metric}" ` +
      `data-sum="${sum}" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" ` +
      `aria-label="${esc(label)}: ${esc(summary)}"><rect class="frame" x="0" y="0" ` +
      `width="${W}" height="${H}"></rect>${body}</svg>` +
      `<figcaption>${esc(label)} <span class="muted">${esc(summary)}</span></figcaption></figure>`;
  }
  const sum = (values) => values.reduce((a, b) => a + (b || 0), 0);
  const last = (values) => { for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i]; return null; };
  function scopeRow(c, s) {
    const turnsSum = s.turns;
    const tokens = sum(s.tokens);
    const dollars = sum(s.cost_usd);
    const p50 = last(s.p50_ms), p95 = last(s.p95_ms);
    return `<div class="chart-row" id="chart-${s.scope}-${slug(s.name)}" data-scope="${s.scope}" ` +
      `data-name="${esc(s.name)}" data-turns="${turnsSum}"><h3>${esc(s.scope === "all" ? "all agents" : s.name)}` +
      (s.scope === "all" ? "" : `<span class="badge">${esc(s.scope)}</span>`) + `</h3><div class="charts-of">` +
      chart("turns", "turns/s", `${turnsSum} turn${turnsSum === 1 ? "" : "s"} in ${c.window_s / 60} min`, bars(s.turns_per_s, "bar"), turnsSum) +
      chart("latency", "p50/p95 latency", `p50 ${ms(p50)}, p95 ${ms(p95)}`,
            lines([{ values: s.p50_ms, css: "p50" }, { values: s.p95_ms, css: "p95" }]),
            sum(s.p95_ms)) +
      chart("tokens", "tokens", `${tokens} in+out`, bars(s.tokens, "bar"), tokens) +
      chart("cost", "cost", cost(dollars), bars(s.cost_usd, "bar cost"), dollars.toFixed(6)) +
      "</div></div>";
  }
  function charts(view) {
    const c = view.charts;
    if (!c) return "";
    return c.scopes.map((s) => scopeRow(c, s)).join("");
  }

  const shown = {};
  function put(id, html) {
    if (shown[id] === html) return;
    shown[id] = html;
    $(id).innerHTML = html;
  }

  function render(view) {
    const focused = document.activeElement && document.activeElement.id;
    put("trees", view.supervisors.map(tree).join("") || "<p class=\"empty\">No supervisor.</p>");
    renderAgents(view.agents);
    put("pools", view.pools.map(pool).join("") || "<p class=\"empty\">No pool.</p>");
    put("charts", charts(view));
    put("turns", turns(view));
    put("events", events(view));
    if (focused && document.activeElement !== $(focused) && $(focused)) $(focused).focus();
  }

  // -- the stream ------------------------------------------------------------------------
  const conn = $("conn");
  function connect() {
    const source = new EventSource("api/stream" +
      (token ? "?token=" + encodeURIComponent(token) : ""));
    source.addEventListener("open", () => { conn.textContent = "live"; conn.dataset.state = "live"; });
    source.addEventListener("state", (e) => render(JSON.parse(e.data)));
    source.addEventListener("error", () => {
      conn.textContent = "reconnecting…";
      conn.dataset.state = "lost";
    });
  }

  // -- actions, each behind a confirmation -------------------------------------------------
  const dialog = $("confirm");
  const notice = $("notice");
  let pending = null;
  let opener = null;

  function say(text, isError) {
    notice.textContent = text;
    notice.className = "notice" + (isError ? " error" : "");
  }

  function describe(b) {
    const d = b.dataset;
    if (d.action === "restart_child") return `Restart ${d.child} under ${d.supervisor}?`;
    return `${b.textContent} ${d.agent}?`;
  }

  document.addEventListener("click", (event) => {
    const b = event.target.closest("button[data-action]");
    if (!b || b.disabled) return;
    const d = b.dataset;
    pending = { action: d.action, body: d.action === "restart_child"
      ? { supervisor: d.supervisor, child: d.child } : { agent: d.agent } };
    opener = b.id;
    $("confirm-text").textContent = describe(b);
    dialog.showModal();
    $("confirm-cancel").focus();
  });

  function close() {
    if (dialog.open) dialog.close();
    if (opener && $(opener)) $(opener).focus();
  }

  $("confirm-cancel").addEventListener("click", () => { pending = null; close(); });
  dialog.addEventListener("cancel", () => { pending = null; opener = null; });
  $("confirm-ok").addEventListener("click", async () => {
    const request = pending;
    pending = null;
    close();
    if (!request) return;
    say(`${request.action}…`, false);
    try {
      const response = await fetch("api/action/" + request.action, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Observer-Token": token },
        body: JSON.stringify({ ...request.body, confirm: true }),
      });
      const answer = await response.json();
      if (response.ok) say(answer.result, false);
      else say(answer.error || response.statusText, true);
    } catch (err) {
      say("the action could not be sent: " + err, true);
    }
  });

  connect();
})();
