// coalesce dashboard: every number comes from the JSON API (GET /v1/...);
// pages poll every 5 s while the tab is visible. No dependencies.
"use strict";

const cfg = document.body.dataset;
const READ_ONLY = "read-only token: sign in with a token from http.tokens to act";

function $(sel) { return document.querySelector(sel); }

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || ("HTTP " + status));
    this.status = status; this.code = e.code; this.field = e.field;
  }
}

async function api(method, path, body) {
  const opts = { method, headers: { "Accept": "application/json" }, credentials: "same-origin" };
  if (method !== "GET") opts.headers["X-CSRF-Token"] = cfg.csrf || "";
  if (body !== undefined) { opts.headers["Content-Type"] = "application/json"; opts.body = typeof body === "string" ? body : JSON.stringify(body); }
  const resp = await fetch(cfg.api + path.replace(/^\//, ""), opts);
  let data = null;
  const text = await resp.text();
  if (text) { try { data = JSON.parse(text); } catch (_) { data = null; } }
  if (resp.status === 401) { location.href = cfg.path + "sign-in"; throw new APIError(401, data); }
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

function flash(msg, ok) {
  const f = $("#flash");
  f.textContent = msg; f.hidden = !msg; f.className = ok ? "ok" : "";
}

// poll runs fn now and every 5 s while the tab is visible.
function poll(fn) {
  let timer = null;
  const run = async () => {
    try { await fn(); $("#updated").textContent = "updated " + new Date().toLocaleTimeString(); }
    catch (e) { if (e.status !== 401) flash(e.message); }
  };
  const start = () => { if (!timer) { run(); timer = setInterval(run, 5000); } };
  const stop = () => { clearInterval(timer); timer = null; };
  document.addEventListener("visibilitychange", () => (document.hidden ? stop() : start()));
  if (!document.hidden) start();
}

// act wraps an action button: disabled with the reason for a read-only
// session, confirmed, and reported.
function actionButton(btn, label) {
  if (cfg.level === "read") { btn.disabled = true; btn.title = READ_ONLY; btn.dataset.readonly = "1"; }
  if (label) btn.textContent = label;
  return btn;
}

const fmtN = (n) => (n === undefined || n === null ? "–" : Math.round(n).toLocaleString("en-US"));
function ago(t) {
  if (!t) return "–";
  let s = (Date.now() - new Date(t).getTime()) / 1000;
  const sign = s < 0 ? "in " : ""; s = Math.abs(s);
  const txt = s < 60 ? s.toFixed(0) + "s" : s < 3600 ? (s / 60).toFixed(1) + "m" : s < 86400 ? (s / 3600).toFixed(1) + "h" : (s / 86400).toFixed(1) + "d";
  return sign ? sign + txt : txt + " ago";
}
const short = (k) => (k ? k.slice(0, 12) + "…" : "");
const time = (t) => (t ? new Date(t).toLocaleTimeString() : "–");
const json = (v) => (v === undefined || v === null ? "" : JSON.stringify(v));
const q = new URLSearchParams(location.search);

// spark draws a small line chart of values as SVG.
function spark(values, color) {
  const ns = "http://www.w3.org/2000/svg", w = 140, h = 28;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("class", "spark");
  if (!values || values.length < 2) return svg;
  const mx = Math.max(...values, 1e-9);
  const pts = values.map((v, i) => (i * (w - 2) / (values.length - 1) + 1).toFixed(1) + "," + (h - 2 - (v / mx) * (h - 4)).toFixed(1));
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none");
  line.setAttribute("stroke", color); line.setAttribute("stroke-width", "1.5");
  svg.append(line);
  return svg;
}
const last = (a) => (a && a.length ? a[a.length - 1] : 0);

function rowsOrEmpty(tbody, rows, cols, text) {
  tbody.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: cols, class: "empty" }, text))]));
}

async function typesInto(select, withAll) {
  const { policies } = await api("GET", "/v1/policies");
  const keep = select.value || q.get("type") || "";
  select.replaceChildren(...(withAll ? [el("option", { value: "" }, "every type")] : []),
    ...policies.map((p) => el("option", { value: p.type }, p.type)));
  if (keep) select.value = keep;
  return policies;
}

const pages = {
  overview() {
    poll(async () => {
      const ov = await api("GET", "/v1/overview");
      $("#saved").textContent = fmtN(ov.totals.jobs_saved);
      $("#events").textContent = fmtN(ov.totals.events);
      $("#jobs").textContent = fmtN(ov.totals.jobs);
      $("#ratio").textContent = ov.totals.events_per_job ? ov.totals.events_per_job.toFixed(2) : "–";
      $("#pending").textContent = fmtN(ov.totals.pending) + (ov.totals.pending_more ? "+" : "");
      $("#dead-count").textContent = fmtN(ov.dead_letters);
      const extras = [];
      if (ov.local_joins) extras.push(el("div", { class: "card", id: "local-joins" }, el("b", {}, "Local joins"), el("dl", { class: "kv" },
        el("dt", {}, "answered locally"), el("dd", {}, fmtN(ov.local_joins.joined)), el("dt", {}, "flushes"), el("dd", {}, fmtN(ov.local_joins.flushes)),
        el("dt", {}, "resubmitted"), el("dd", {}, fmtN(ov.local_joins.resubmitted)), el("dt", {}, "rounds remembered"), el("dd", {}, fmtN(ov.local_joins.rounds)))));
      if (ov.outbox) extras.push(el("div", { class: "card", id: "outbox" }, el("b", {}, "Outbox backlog"), el("dl", { class: "kv" },
        el("dt", {}, "rows"), el("dd", {}, fmtN(ov.outbox.backlog_rows)), el("dt", {}, "oldest row"), el("dd", {}, ov.outbox.oldest_row_seconds.toFixed(1) + " s"))));
      if (ov.errors) extras.push(el("div", { class: "card error" }, "Could not read: " + Object.entries(ov.errors).map(([k, v]) => k + ": " + v).join("; ")));
      $("#extras").replaceChildren(...extras);
      rowsOrEmpty($("#types tbody"), (ov.types || []).map((t) => {
        const s = t.series || {};
        return el("tr", { "data-type": t.type },
          el("td", {}, el("a", { href: cfg.path + "rounds?type=" + encodeURIComponent(t.type) }, t.type)),
          el("td", {}, spark(s.events_per_s, "#1f5fa8"), el("small", {}, last(s.events_per_s).toFixed(1) + "/s")),
          el("td", {}, spark(s.jobs_per_s, "#2a9d4b"), el("small", {}, last(s.jobs_per_s).toFixed(1) + "/s")),
          el("td", {}, spark(s.events_per_job, "#e0a020"), el("small", {}, t.events_per_job ? t.events_per_job.toFixed(2) : "–")),
          el("td", { class: "n events" }, fmtN(t.events)),
          el("td", { class: "n saved" }, fmtN(t.jobs_saved)),
          el("td", { class: "n pending" }, fmtN(t.pending) + (t.pending_more ? "+" : "")),
          el("td", {}, t.oldest_overdue ? el("a", { class: "badge warn", href: cfg.path + "round?type=" + encodeURIComponent(t.type) + "&key=" + t.oldest_overdue.key }, t.oldest_overdue.overdue_by + " overdue") : "–"),
          el("td", { class: "n dead" }, t.dead_letters ? el("a", { href: cfg.path + "dead?type=" + encodeURIComponent(t.type) }, fmtN(t.dead_letters)) : "0"));
      }), 9, "No job types.");
    });
  },

  async rounds() {
    const sel = $("#type");
    await typesInto(sel, false);
    let after = "";
    const load = async (append) => {
      if (!sel.value) return;
      const page = await api("GET", "/v1/rounds/" + encodeURIComponent(sel.value) + "?limit=50" + (append && after ? "&after=" + after : ""));
      after = page.next;
      $("#more").hidden = !page.next;
      const rows = page.rounds.map((r) => el("tr", { "data-key": r.key, "data-round": r.round },
        el("td", {}, el("a", { class: "mono", href: cfg.path + "round?type=" + encodeURIComponent(sel.value) + "&key=" + r.key, title: r.key }, short(r.key))),
        el("td", {}, el("span", { class: "badge " + r.state }, r.state), r.scheduled ? " scheduled" : ""),
        el("td", { title: r.due_at || "" }, r.due_at ? ago(r.due_at) : "at once"),
        el("td", {}, ago(r.first_seen || r.opened_at)),
        el("td", { class: "n" }, r.state === "pending" ? r.events : "–"),
        el("td", { class: "n" }, r.items || ""),
        el("td", {}, el("span", { class: "args mono", title: json(r.payload || r.args) }, r.args_truncated ? "(large)" : json(r.payload || r.args))),
        el("td", {}, r.state === "pending" ? cancelButton(sel.value, r.key, r.round, () => load(false)) : "")));
      if (append) $("#rounds tbody").append(...rows);
      else rowsOrEmpty($("#rounds tbody"), rows, 8, "No round of " + sel.value + " is pending.");
    };
    sel.addEventListener("change", () => { after = ""; history.replaceState(null, "", "?type=" + encodeURIComponent(sel.value)); load(false); });
    $("#more").addEventListener("click", () => load(true).catch((e) => flash(e.message)));
    $("#search").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const res = await api("GET", "/v1/search?type=" + encodeURIComponent(sel.value) + "&q=" + encodeURIComponent($("#q").value));
        flash("");
        const href = cfg.path + "round?type=" + encodeURIComponent(res.type) + "&key=" + res.key;
        $("#found").replaceChildren(el("div", { class: "card", id: "search-result" },
          el("p", {}, "Read as ", el("b", {}, res.kind.replace("_", " ")), ": key ", el("a", { class: "mono", href, id: "found-key" }, res.key)),
          res.canonical_args ? el("p", {}, "canonical args ", el("code", {}, json(res.canonical_args)), res.key_fields ? " · key fields " + res.key_fields.join(", ") : "") : null,
          res.round ? el("p", { id: "found-round" }, el("span", { class: "badge pending" }, "pending"), " round ", el("code", {}, res.round.round), " · ", res.round.events, " events · due ", res.round.due_at ? ago(res.round.due_at) : "at once", " · ", el("a", { href }, "open"))
            : el("p", { id: "found-none" }, "No round of this key is pending.")));
      } catch (e) { flash(e.message); }
    });
    poll(() => (after ? Promise.resolve() : load(false)));
  },

  round() {
    const type = q.get("type"), key = q.get("key");
    $("#round-key").textContent = type + " " + key;
    let current = null;
    const btn = actionButton($("#cancel"));
    btn.addEventListener("click", async () => {
      if (!current || !confirm("Cancel round " + current.round + " of " + type + "? Its job will not run; " + current.events + " events are dropped.")) return;
      try {
        const res = await api("DELETE", "/v1/rounds/" + encodeURIComponent(type) + "/" + key + "?round=" + current.round);
        flash("Cancelled round " + res.cancelled.round + " (" + res.purged + " messages purged).", true);
        refresh();
      } catch (e) { flash(e.message); }
    });
    const refresh = async () => {
      const [round, tl] = await Promise.all([
        api("GET", "/v1/rounds/" + encodeURIComponent(type) + "/" + key).catch((e) => { if (e.status === 404) return null; throw e; }),
        api("GET", "/v1/rounds/" + encodeURIComponent(type) + "/" + key + "/history")]);
      current = round;
      btn.hidden = !round;
      $("#summary").replaceChildren(round ? el("dl", { class: "kv", id: "round-summary" },
        el("dt", {}, "state"), el("dd", {}, el("span", { class: "badge pending" }, round.window ? "throttle window" : "pending"), round.published ? " · published" : " · not yet published"),
        el("dt", {}, "round"), el("dd", { class: "mono", id: "round-token" }, round.round),
        el("dt", {}, "events"), el("dd", { id: "round-events" }, round.events),
        el("dt", {}, "first seen"), el("dd", {}, round.first_seen ? time(round.first_seen) + " (" + ago(round.first_seen) + ")" : "–"),
        el("dt", {}, "last seen"), el("dd", {}, round.last_seen ? time(round.last_seen) + " (" + ago(round.last_seen) + ")" : "–"),
        el("dt", {}, "due"), el("dd", {}, round.due_at ? time(round.due_at) + " (" + ago(round.due_at) + ")" : "at once"),
        el("dt", {}, "items"), el("dd", {}, round.items || "–"),
        round.payload ? el("dt", {}, "payload") : null, round.payload ? el("dd", {}, el("pre", {}, JSON.stringify(round.payload, null, 2))) : null)
        : el("p", { id: "no-round" }, "No round of this key is pending now."));
      $("#timeline").src = cfg.path + "timeline.svg?type=" + encodeURIComponent(type) + "&key=" + key + "&t=" + Date.now();
      $("#sees").textContent = tl.sees;
      rowsOrEmpty($("#history tbody"), tl.rounds.slice().reverse().map((r) => el("tr", { "data-round": r.round },
        el("td", { class: "mono" }, r.round), el("td", {}, el("span", { class: "badge " + r.state }, r.state)),
        el("td", {}, time(r.opened_at)), el("td", {}, r.due_at ? time(r.due_at) : "at once"), el("td", { class: "n" }, r.events),
        el("td", {}, r.started_at ? time(r.started_at) + (r.starts > 1 ? " (" + r.starts + " starts)" : "") : "–"),
        el("td", {}, r.finished_at ? time(r.finished_at) : "–"))), 7, "No rounds known for this key.");
    };
    poll(refresh);
  },

  explain() {
    $("#explain").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        const ex = await api("POST", "/v1/explain", $("#event").value);
        flash("");
        const p = ex.policy;
        $("#explanation").replaceChildren(el("div", { class: "card", id: "explanation-card" }, el("dl", { class: "kv" },
          el("dt", {}, "would be"), el("dd", { id: "would" }, el("b", {}, ex.would)),
          el("dt", {}, "policy"), el("dd", {}, p.mode + (p.window ? " " + p.window : "") + (p.extend ? " extend, max wait " + p.max_wait : "") + " · payload " + p.payload + " · fail " + p.fail),
          el("dt", {}, "key fields"), el("dd", {}, ex.key_fields ? ex.key_fields.join(", ") : ex.explicit_key ? "the event's explicit key" : "all of args"),
          el("dt", {}, "canonical args"), el("dd", {}, el("code", {}, json(ex.canonical_args))),
          el("dt", {}, "fingerprint"), el("dd", { class: "mono" }, ex.fingerprint),
          el("dt", {}, "round key"), el("dd", {}, el("a", { class: "mono", href: cfg.path + "round?type=" + encodeURIComponent(ex.type) + "&key=" + ex.key }, ex.key)),
          el("dt", {}, "pending round"), el("dd", { id: "explain-pending" }, ex.pending ? ex.pending.round + " · " + ex.pending.events + " events · due " + (ex.pending.due_at ? ago(ex.pending.due_at) : "at once") : "none"))));
      } catch (e) { flash((e.field ? e.field + ": " : "") + e.message); }
    });
  },

  async dead() {
    const tsel = $("#dtype"), csel = $("#dcode");
    await typesInto(tsel, true);
    let wantCode = q.get("code") || ""; // until the codes are listed
    const code = () => csel.value || wantCode;
    let matching = 0;
    const filter = () => "type=" + encodeURIComponent(tsel.value) + "&code=" + encodeURIComponent(code());
    const replayAll = actionButton($("#replay-all")), purgeAll = actionButton($("#purge-all"));
    const load = async () => {
      const res = await api("GET", "/v1/dead?limit=200&" + filter());
      matching = res.matching;
      const keep = code();
      csel.replaceChildren(el("option", { value: "" }, "any code"), ...Object.keys(res.codes).sort().map((c) => el("option", { value: c }, (c || "(none)") + " · " + res.codes[c])));
      csel.value = keep;
      wantCode = "";
      $("#matching").textContent = res.matching + " dead letter" + (res.matching === 1 ? "" : "s") + " match";
      $("#matching").dataset.count = res.matching;
      if (cfg.level !== "read") { replayAll.disabled = purgeAll.disabled = res.matching === 0; }
      rowsOrEmpty($("#letters tbody"), res.dead_letters.map((d) => el("tr", { "data-seq": d.seq },
        el("td", { class: "n" }, el("a", { href: cfg.path + "letter?seq=" + d.seq }, d.seq)), el("td", {}, d.type),
        el("td", {}, d.code ? el("span", { class: "badge" }, d.code) : "–"), el("td", {}, el("span", { class: "args", title: d.reason }, d.reason)),
        el("td", { class: "n" }, d.attempts || ""), el("td", {}, ago(d.stored)), el("td", { class: "n" }, d.summary ? d.summary.events : ""),
        el("td", {}, el("a", { href: cfg.path + "letter?seq=" + d.seq }, "open")))), 8, "No dead letter matches.");
    };
    const bulk = async (what) => {
      const n = matching;
      const scope = (tsel.value ? "of " + tsel.value : "of every type") + (code() ? " with code " + code() : "");
      if (!confirm((what === "replay" ? "Replay " : "Purge ") + n + " dead letter" + (n === 1 ? "" : "s") + " " + scope + "?")) return;
      try {
        const res = what === "replay" ? await api("POST", "/v1/dead:replay?" + filter()) : await api("DELETE", "/v1/dead?" + filter());
        flash((what === "replay" ? "Replayed " + res.replayed : "Purged " + res.purged) + " dead letters.", true);
        await load();
      } catch (e) { flash(e.message); }
    };
    replayAll.addEventListener("click", () => bulk("replay"));
    purgeAll.addEventListener("click", () => {
      if (!tsel.value) { flash("Purging needs a type: choose one."); return; }
      bulk("purge");
    });
    tsel.addEventListener("change", () => load().catch((e) => flash(e.message)));
    csel.addEventListener("change", () => load().catch((e) => flash(e.message)));
    poll(load);
  },

  letter() {
    const seq = q.get("seq");
    $("#seq").textContent = seq;
    const replay = actionButton($("#replay")), purge = actionButton($("#purge"));
    const act = async (what) => {
      if (!confirm((what === "replay" ? "Replay" : "Purge") + " dead letter " + seq + "?")) return;
      try {
        if (what === "replay") await api("POST", "/v1/dead/" + seq + "/replay");
        else await api("DELETE", "/v1/dead/" + seq);
        flash((what === "replay" ? "Replayed" : "Purged") + " dead letter " + seq + ".", true);
        replay.disabled = purge.disabled = true;
      } catch (e) { flash(e.message); }
    };
    replay.addEventListener("click", () => act("replay"));
    purge.addEventListener("click", () => act("purge"));
    api("GET", "/v1/dead/" + seq).then((d) => {
      $("#letter").replaceChildren(el("dl", { class: "kv" },
        el("dt", {}, "type"), el("dd", {}, d.type), el("dt", {}, "code"), el("dd", {}, d.code || "–"),
        el("dt", {}, "reason"), el("dd", { id: "reason" }, d.reason), el("dt", {}, "attempts"), el("dd", {}, d.attempts || "–"),
        el("dt", {}, "stored"), el("dd", {}, time(d.stored) + " (" + ago(d.stored) + ")"),
        el("dt", {}, "round"), el("dd", { class: "mono" }, d.round || "–"),
        el("dt", {}, "summary"), el("dd", {}, d.summary ? d.summary.events + " events, first " + time(d.summary.first_seen) + ", last " + time(d.summary.last_seen) + (d.summary.items ? ", " + d.summary.items.length + " items" : "") : "–"),
        el("dt", {}, "args"), el("dd", {}, el("pre", {}, JSON.stringify(d.args, null, 2))),
        el("dt", {}, "headers"), el("dd", {}, el("pre", {}, JSON.stringify(d.headers, null, 2)))));
    }).catch((e) => flash(e.message));
  },

  policies() {
    poll(async () => {
      const { policies } = await api("GET", "/v1/policies");
      rowsOrEmpty($("#policies tbody"), policies.map((p) => el("tr", { "data-type": p.type },
        el("td", {}, el("b", {}, p.type)), el("td", {}, p.mode), el("td", {}, p.window || "–"),
        el("td", {}, p.extend ? "extend, max " + p.max_wait : "–"), el("td", {}, p.payload + (p.max_items ? " (max " + p.max_items + (p.item_field ? " of " + p.item_field : "") + ")" : "")),
        el("td", {}, p.key_fields ? p.key_fields.join(", ") : "all args"), el("td", {}, (p.until || "") + (p.ttl ? " ttl " + p.ttl : "") || "–"),
        el("td", {}, p.trailing ? "yes" : "–"), el("td", {}, p.fail))), 9, "No policies.");
    });
  },

  workers() {
    poll(async () => {
      const w = await api("GET", "/v1/workers");
      $("#stream").textContent = "Stream " + w.stream + ": " + fmtN(w.messages) + " messages (schedules, jobs, dead letters).";
      rowsOrEmpty($("#workers tbody"), w.workers.map((c) => el("tr", { "data-consumer": c.name },
        el("td", {}, el("b", {}, c.name)), el("td", { class: "mono" }, (c.filter_subjects || []).join(" ")),
        el("td", { class: "n pending" }, fmtN(c.pending)), el("td", { class: "n" }, fmtN(c.ack_pending)), el("td", { class: "n" }, fmtN(c.redelivered)),
        el("td", { class: "n" }, fmtN(c.waiting)), el("td", {}, c.last_delivered ? ago(c.last_delivered) : "never"), el("td", {}, c.ack_wait), el("td", { class: "n" }, c.max_deliver))),
      9, "No worker has connected to this stream yet.");
    });
  },
};

function cancelButton(type, key, round, after) {
  const b = actionButton(el("button", { class: "danger cancel", "data-round": round }, "Cancel"));
  b.addEventListener("click", async () => {
    if (!confirm("Cancel round " + round + " of " + type + "? Its job will not run.")) return;
    try {
      await api("DELETE", "/v1/rounds/" + encodeURIComponent(type) + "/" + key + "?round=" + round);
      flash("Cancelled round " + round + ".", true);
      after();
    } catch (e) { flash(e.message); }
  });
  return b;
}

const init = pages[cfg.page];
if (init) Promise.resolve(init()).catch((e) => flash(e.message));
