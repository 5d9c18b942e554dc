// flexgate dashboard: the overview page. Reads the gateway's API only (same origin), updates
// live from server-sent events (GET /v1/stream), writes text with textContent only (no markup
// from data), and draws the meter chart as SVG itself: no library, no CDN.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const HISTORY_S = 3600;
// `now` is the gateway's clock (its status time), which runs faster than the wall in the demo.
const state = { tz: "UTC", points: [], events: [], updates: 0, now: null, forecastDrawn: false };

const $ = (id) => document.getElementById(id);
const kw = (w) => (w === null || w === undefined || !Number.isFinite(w) ? "—" : (w / 1000).toFixed(1));
const pct = (x) => (x === null || x === undefined || !Number.isFinite(x) ? "—" : (x * 100).toFixed(1));
const set = (id, text) => { const el = $(id); if (el) el.textContent = text; };

// Times in the site's zone, dates as ISO 8601 writes them (2026-12-04 20:35): no reader takes
// 04/12 for April 12 or December 4 depending on where they live.
function clock(ms, withDate, withSeconds) {
  const options = { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
    second: "2-digit", hourCycle: "h23", timeZone: state.tz };
  try {
    const p = {};
    new Intl.DateTimeFormat("en-US", options).formatToParts(new Date(ms)).forEach((x) => { p[x.type] = x.value; });
    const time = `${p.hour}:${p.minute}` + (withSeconds ? `:${p.second}` : "");
    return withDate ? `${p.year}-${p.month}-${p.day} ${time}` : time;
  } catch (_) {
    const iso = new Date(ms).toISOString();
    return withDate ? `${iso.slice(0, 10)} ${iso.slice(11, withSeconds ? 19 : 16)}` : iso.slice(11, withSeconds ? 19 : 16);
  }
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function replaceRows(table, rows, empty, columns) {
  const body = $(table).tBodies[0];
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = document.createElement("tr");
    const td = cell(tr, empty, "muted");
    td.colSpan = columns;
    body.appendChild(tr);
    return;
  }
  rows.forEach((tr) => body.appendChild(tr));
}

// Among the site's replicas ([ha]): this one's role and the leader; hidden for a single gateway.
function replicationText(r) {
  if (!r) return null;
  const lag = (r.replicas || [])
    .map((x) => `${x.name} ${x.lag_records === 0 ? "up to date" : x.lag_records + " behind"}`)
    .join(", ");
  const who = r.role === "leader"
    ? `${r.replica} leads (epoch ${r.epoch})`
    : r.leader
      ? `${r.replica} stands by; ${r.leader} leads (epoch ${r.epoch})`
      : `${r.replica} stands by; no replica leads${r.reason ? " (" + r.reason + ")" : ""}`;
  return lag ? `${who} · ${lag}` : who;
}

function showReplication(r) {
  const text = replicationText(r);
  const fact = $("replica-fact");
  if (fact) fact.hidden = text === null;
  if (text !== null) set("replica", text);
}

function showStatus(s) {
  state.tz = s.time_zone || "UTC";
  set("site", s.site);
  set("time-zone", state.tz);
  showReplication(s.replication);
  set("meter", kw(s.meter_w));
  const quality = $("meter-quality");
  quality.textContent = s.meter_quality || "none yet";
  quality.className = "badge " + (s.meter_quality === "measured" ? "state-ok" : "state-warn");
  set("ceiling", kw(s.meter_ceiling_w));
  set("phase", s.phase || "none");
  set("gpu-power", kw(s.measured_gpu_w));
  set("gpu-budget", kw(s.gpu_budget_w));
  set("trim", kw(s.trim_w));
  showFlexNow(s);
  set("ledger-head", s.log_checkpoint || "—");
  const compliance = $("compliance");
  const note = $("compliance-note");
  if (s.meter_ceiling_w === null || s.meter_ceiling_w === undefined) {
    compliance.textContent = "No event";
    compliance.dataset.state = "none";
    note.textContent = "No event constrains the site.";
    set("margin", "—");
  } else if (s.meter_w === null || s.meter_w === undefined) {
    compliance.textContent = "No reading";
    compliance.dataset.state = "warn";
    note.textContent = "No meter figure yet.";
  } else {
    const margin = s.meter_ceiling_w - s.meter_w;
    set("margin", kw(margin));
    const measured = s.meter_quality === "measured";
    if (margin >= 0) {
      compliance.textContent = "Under the ceiling";
      compliance.dataset.state = measured ? "ok" : "warn";
    } else {
      compliance.textContent = "OVER the ceiling";
      compliance.dataset.state = "over";
    }
    note.textContent = measured
      ? `${kw(Math.abs(margin))} kW ${margin >= 0 ? "below" : "above"} the ceiling, by the meter.`
      : `The meter figure is the ${s.meter_quality} estimate: compliance is not shown by the meter now.`;
  }
}

function showEvents(events) {
  state.events = events;
  const rows = events.map((e) => {
    const tr = document.createElement("tr");
    cell(tr, e.id);
    cell(tr, String(e.revision), "num");
    const st = cell(tr, e.state + (e.test ? " (test)" : ""));
    st.className = e.state === "active" || e.state === "ramping" ? "state-warn" : "";
    cell(tr, kw(e.ceiling_w), "num");
    cell(tr, kw(e.lowest_ceiling_w), "num");
    cell(tr, clock(Date.parse(e.start), true));
    const td = document.createElement("td");
    const a = document.createElement("a");
    a.href = "/dashboard/events/" + encodeURIComponent(e.id);
    a.textContent = "audit";
    a.setAttribute("aria-label", "audit of event " + e.id);
    td.appendChild(a);
    tr.appendChild(td);
    return tr;
  });
  replaceRows("events", rows, "No events.", 7);
  const select = $("opt-event");
  const chosen = select.value;
  select.replaceChildren();
  const none = document.createElement("option");
  none.value = "";
  none.textContent = "—";
  select.appendChild(none);
  events.filter((e) => !["completed", "cancelled", "opted_out"].includes(e.state)).forEach((e) => {
    const o = document.createElement("option");
    o.value = e.id;
    o.textContent = `${e.id} (${e.state})`;
    select.appendChild(o);
  });
  select.value = chosen;
}

function showPlan(p) {
  set("plan-in-force", p.in_force ? `yes, generation ${p.generation}` : "no (no event constrains the site)");
  set("plan-policy", p.in_force ? `${p.policy} · ${p.objective || "tokens"}` : "—");
  set("plan-budget", kw(p.gpu_budget_w));
  set("plan-planned", kw(p.planned_power_w));
  set("plan-shortfall", kw(p.shortfall_w));
  set("plan-fallbacks", p.fallbacks.length ? `${p.fallbacks.length} job(s): ${p.fallbacks.join(", ")}` : "none");
  set("plan-progress", pct(p.expected ? p.expected.progress_kept_share : null));
  set("plan-tokens", pct(p.expected ? p.expected.tokens_kept_share : null));
  set("plan-guarantee", guaranteeText(p));
}

// The plan's contract against the equal cut of the same budget, in words.
function guaranteeText(p) {
  const g = p.guarantee;
  if (!p.in_force) return "—";
  if (!g) return "not stated (no hedge judged this plan)";
  const signed = (v) => `${v >= 0 ? "+" : "−"}${Math.abs(v * 100).toFixed(2)} %`;
  const noise = g.noise > 0 ? `, of which ${(g.noise * 100).toFixed(2)} % for measurement noise` : "";
  const kept = g.blend > 0
    ? `${(g.kept * 100).toFixed(0)} % of the way to the best mix of plans the worst cases allow (worst cases weighed ${(g.blend * 100).toFixed(0)} % into the estimates)`
    : `${(g.kept * 100).toFixed(0)} % of the estimated plan kept`;
  return `worst case ${signed(g.worst_gain_vs_equal)} of the equal cut's ${g.objective} `
    + `(limit −${(g.tolerance * 100).toFixed(2)} %${noise}); ${kept}. `
    + `Worst case: ${g.worst_case}.`;
}

// Why a cap is not counted on, in the operator's words (the kinds of JobView.unconfirmed).
const UNCONFIRMED = {
  unreachable: "node did not answer",
  refused: "refused by the node",
  not_applied: "driver did not apply it",
  raised_out_of_band: "limit raised after it was set",
  unreliable: "keeps being undone",
  no_permission: "agent may not set limits",
  gpu_lost: "GPU lost",
  unresponsive: "driver hung",
  not_supported: "GPU cannot be capped",
  driver_error: "driver error",
  not_measured: "node not measured",
};

function confirmationText(j) {
  const reapplied = j.cap_reapplied > 0 ? ` (re-applied ×${j.cap_reapplied})` : "";
  if (j.confirmed && !j.cap_unreliable) return `yes${reapplied}`;
  const why = j.unconfirmed || (j.cap_unreliable ? "unreliable" : null);
  return `NOT confirmed${why ? ": " + (UNCONFIRMED[why] || why) : ""}${reapplied}`;
}

function showJobs(jobs, total, plan) {
  set("jobs-count", `(${total} running; caps not confirmed first, then the deepest: ${jobs.length} shown)`);
  const shares = new Map((plan.entries || []).map((e) => [e.job, e]));
  const rows = jobs.map((j) => {
    const tr = document.createElement("tr");
    cell(tr, j.id);
    cell(tr, String(j.gpus), "num");
    cell(tr, j.cap_w_per_gpu.toFixed(0), "num");
    cell(tr, confirmationText(j), j.confirmed && !j.cap_unreliable ? "" : "state-bad");
    cell(tr, kw(j.measured_power_w), "num");
    cell(tr, j.measured_tokens_per_s === null ? "unknown (not reported)" : `${j.measured_tokens_per_s.toFixed(0)} measured`, "num");
    cell(tr, j.knowledge_evidence ? `${j.elasticity}: ${j.knowledge_evidence}` : j.elasticity);
    const entry = shares.get(j.id);
    cell(tr, entry && entry.expected_share !== null && entry.expected_share !== undefined ? `${pct(entry.expected_share)} % (estimate)` : "—", "num");
    return tr;
  });
  replaceRows("jobs", rows, "No jobs.", 8);
}

// ---- the chart ---------------------------------------------------------------------------

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function niceStep(span, target) {
  const raw = span / target;
  const base = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (base * m >= raw) return base * m;
  return base * 10;
}

function drawChart() {
  const host = $("chart");
  const W = 1200, H = 360, L = 64, R = 16, T = 14, B = 40;
  const now = state.now || Date.now();
  // The last hour, or from the first reading when there is less (at least a minute shown).
  const first = state.points.length ? state.points[0].t : now;
  const from = Math.min(now - 60000, Math.max(now - HISTORY_S * 1000, first - 5000));
  const pts = state.points.filter((p) => p.t >= from);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "presentation" });
  const maxKw = Math.max(1, ...pts.map((p) => Math.max(p.meter, p.ceiling || 0)),
    ...state.events.map((e) => e.pre_event_meter_w / 1000)) * 1.1;
  const x = (t) => L + ((t - from) / (now - from)) * (W - L - R);
  const y = (v) => H - B - (v / maxKw) * (H - T - B);
  // Event windows.
  for (const e of state.events) {
    const phases = e.phases.map((p) => ({ phase: p.phase, at: Date.parse(p.at) }));
    for (let i = 0; i < phases.length; i++) {
      const p = phases[i];
      if (!["ramping", "active", "recovering"].includes(p.phase)) continue;
      const end = i + 1 < phases.length ? phases[i + 1].at : now;
      const a = Math.max(p.at, from), b = Math.min(end, now);
      if (b <= a) continue;
      svg.appendChild(el("rect", { x: x(a), y: T, width: x(b) - x(a), height: H - T - B,
        fill: p.phase === "active" ? "#e69f00" : "#56b4e9", "fill-opacity": 0.18 }));
      svg.appendChild(el("text", { x: x(a) + 4, y: T + 14, "font-size": 12, fill: "#5a4300" }, `${e.id} ${p.phase}`));
    }
    // The pre-event meter: the event's own baseline, dashed over its window.
    const start = phases.length ? phases[0].at : null;
    const last = phases.length ? phases[phases.length - 1].at : null;
    if (start !== null && last !== null && last > from && start < now) {
      const a = x(Math.max(start, from)), b = x(Math.min(last, now));
      svg.appendChild(el("line", { x1: a, x2: b, y1: y(e.pre_event_meter_w / 1000), y2: y(e.pre_event_meter_w / 1000),
        stroke: "#555", "stroke-width": 1.5, "stroke-dasharray": "6 4" }));
    }
  }
  // Axes and ticks.
  const step = niceStep(maxKw, 5);
  for (let v = 0; v <= maxKw; v += step) {
    svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e4e4e4" }));
    svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 12, fill: "#333" }, `${v.toFixed(step < 1 ? 1 : 0)}`));
  }
  const span = now - from;
  const tick = [10, 15, 30, 60, 120, 300, 600, 900, 1800].map((m) => m * 1000).find((m) => span / m <= 8) || 3600000;
  for (let t = Math.ceil(from / tick) * tick; t <= now; t += tick) {
    svg.appendChild(el("line", { x1: x(t), x2: x(t), y1: T, y2: H - B, stroke: "#e4e4e4" }));
    svg.appendChild(el("text", { x: x(t), y: H - B + 16, "text-anchor": "middle", "font-size": 12, fill: "#333" }, clock(t, false, tick < 60000)));
  }
  svg.appendChild(el("text", { x: 14, y: T + (H - T - B) / 2, transform: `rotate(-90 14 ${T + (H - T - B) / 2})`,
    "text-anchor": "middle", "font-size": 12, fill: "#333" }, "kW at the meter"));
  svg.appendChild(el("text", { x: L + (W - L - R) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, fill: "#333" },
    `local time, ${state.tz}`));
  svg.appendChild(el("path", { d: `M${L} ${T} V${H - B} H${W - R}`, stroke: "#555", fill: "none" }));
  // The ceiling, stepped, and the meter.
  let d = "";
  let prev = null;
  for (const p of pts) {
    if (p.ceiling === null) { prev = null; continue; }
    d += prev === null ? `M${x(p.t)} ${y(p.ceiling)}` : ` H${x(p.t)} V${y(p.ceiling)}`;
    prev = p;
  }
  if (d) svg.appendChild(el("path", { d, stroke: "#d55e00", "stroke-width": 2.2, fill: "none" }));
  if (pts.length) {
    svg.appendChild(el("polyline", { points: pts.map((p) => `${x(p.t)},${y(p.meter)}`).join(" "),
      stroke: "#0072b2", "stroke-width": 2.2, fill: "none" }));
  }
  host.replaceChildren(svg);
}

// ---- the flexibility curve --------------------------------------------------------------

// Whether an event's caps are in force: the gateway then measures the curve and the
// Flexibility now figure from them (how much more the site can shed), not from uncapped.
const capsInForce = (s) => s.gpu_budget_w !== null && s.gpu_budget_w !== undefined;

// The Flexibility now card: its figure, and what it is measured from.
function showFlexNow(s) {
  set("flex", kw(s.flex_available_w));
  const note = $("flex").closest(".card").querySelector(".note");
  if (note) {
    note.id = "flex-note";
    note.textContent = capsInForce(s)
      ? "more, from the caps in force: every job from its cap to its floor (the facility model's lower bound)"
      : "from the meter now to the model's highest meter with every job at its floor";
  }
  // The curve follows the caps: fetch it again when an event's caps come or go.
  const from = capsInForce(s) ? "current_caps" : "uncapped";
  if (state.flexFrom !== undefined && state.flexFrom !== from) state.flexStale = true;
}

// Shares of the objective lost at each level: expected, and its range over the plausible
// shapes when the planner hedges (the API gives both in the objective's units, with the jobs'
// uncapped value they are shares of).
function flexSeries(curve) {
  const total = curve.uncapped_value > 0 ? curve.uncapped_value : null;
  return curve.points.map((p) => ({
    kw: p.meter_shed_w / 1000,
    lost: total ? p.value_lost / total : p.progress_lost,
    range: total && p.value_lost_range ? [p.value_lost_range[0] / total, p.value_lost_range[1] / total] : null,
    tiers: p.tiers_touched.length > 0,
    jobs: p.jobs_capped,
  }));
}

function drawFlexibility(curve) {
  const host = $("flex-chart");
  const pts = flexSeries(curve);
  const more = curve.from === "current_caps";
  state.flexFrom = more ? "current_caps" : "uncapped";
  state.flexStale = false;
  if (pts.length < 2) { host.textContent = "No curve yet."; return; }
  const W = 1200, H = 300, L = 64, R = 16, T = 14, B = 40;
  const maxKw = Math.max(1, ...pts.map((p) => p.kw)) * 1.02;
  const maxShare = Math.min(1, Math.max(0.05, ...pts.map((p) => Math.max(p.lost, p.range ? p.range[1] : 0))) * 1.1);
  const x = (v) => L + (v / maxKw) * (W - L - R);
  const y = (v) => H - B - (v / maxShare) * (H - T - B);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "presentation" });
  const ystep = niceStep(maxShare * 100, 5) / 100;
  for (let v = 0; v <= maxShare + 1e-9; v += ystep) {
    svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e4e4e4" }));
    svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 12, fill: "#333" }, (v * 100).toFixed(ystep < 0.01 ? 1 : 0)));
  }
  const xstep = niceStep(maxKw, 8);
  for (let v = 0; v <= maxKw; v += xstep) {
    svg.appendChild(el("line", { x1: x(v), x2: x(v), y1: T, y2: H - B, stroke: "#e4e4e4" }));
    svg.appendChild(el("text", { x: x(v), y: H - B + 16, "text-anchor": "middle", "font-size": 12, fill: "#333" }, v.toFixed(xstep < 1 ? 1 : 0)));
  }
  svg.appendChild(el("path", { d: `M${L} ${T} V${H - B} H${W - R}`, stroke: "#555", fill: "none" }));
  svg.appendChild(el("text", { x: 14, y: T + (H - T - B) / 2, transform: `rotate(-90 14 ${T + (H - T - B) / 2})`,
    "text-anchor": "middle", "font-size": 12, fill: "#333" }, `% of ${curve.objective === "tokens" ? "tokens/s" : "GPU-weighted progress"} lost`));
  svg.appendChild(el("text", { x: L + (W - L - R) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, fill: "#333" },
    more ? "kW more shed at the meter, from the caps in force (lower bound)" : "kW shed at the meter (lower bound)"));
  const ranged = pts.filter((p) => p.range);
  if (ranged.length === pts.length) {
    const upper = pts.map((p) => `${x(p.kw)},${y(p.range[1])}`);
    const lower = pts.slice().reverse().map((p) => `${x(p.kw)},${y(p.range[0])}`);
    svg.appendChild(el("polygon", { class: "flex-range", points: upper.concat(lower).join(" "), fill: "#009e73", "fill-opacity": 0.18, stroke: "none" }));
  }
  svg.appendChild(el("polyline", { class: "flex-expected", points: pts.map((p) => `${x(p.kw)},${y(p.lost)}`).join(" "),
    stroke: "#009e73", "stroke-width": 2.4, fill: "none" }));
  for (const p of pts.filter((q) => q.tiers)) {
    svg.appendChild(el("circle", { cx: x(p.kw), cy: y(p.lost), r: 4, fill: "#fff", stroke: "#cc79a7", "stroke-width": 2 }));
  }
  host.replaceChildren(svg);
  const last = pts[pts.length - 1];
  if (more) {
    const already = curve.uncapped_value > 0 ? curve.from_value_lost / curve.uncapped_value : null;
    set("flex-caption", `The flexibility curve at ${clock(Date.parse(curve.at), false)} (objective ${curve.objective}), an event's caps in force: `
      + `how much more the site can shed, from the caps in force: up to ${last.kw.toFixed(1)} kW more at the meter (the facility model's lower bound, cooling settled), `
      + `expected to cost a further ${(last.lost * 100).toFixed(1)} % with every job at its floor`
      + (already === null ? ". " : ` (the caps in force already cost ${(already * 100).toFixed(1)} %). `)
      + `Estimates from the planner's curves (source ${curve.source}), not measurements. `
      + "The Flexibility now card is this curve's deepest level.");
    return;
  }
  set("flex-caption", `The flexibility curve at ${clock(Date.parse(curve.at), false)} (objective ${curve.objective}): `
    + `up to ${last.kw.toFixed(1)} kW at the meter (the facility model's lower bound, cooling settled), expected to cost `
    + `${(last.lost * 100).toFixed(1)} % with every job at its floor. Estimates from the planner's curves (source ${curve.source}), not measurements. `
    + "Reductions are from the jobs' uncapped draw; the Flexibility now card starts from the meter now and the model's highest meter at the floors, so it carries the model's whole error and is smaller.");
}

async function loadFlexibility() {
  try {
    const r = await fetch("/v1/flexibility");
    if (r.status === 404) {
      $("flex-chart").textContent = "No curve yet: no telemetry, or a proportional policy.";
      state.flexStale = true;
      return;
    }
    if (!r.ok) { state.flexStale = true; return; }
    drawFlexibility(await r.json());
  } catch (_) {
    set("flex-caption", "The flexibility curve could not be read.");
  }
}

// ---- the forecast ------------------------------------------------------------------------

// What the share of the objective is a share of, in the operator's words.
const objectiveWords = (objective) => (objective === "tokens" ? "tokens/s" : "GPU-weighted progress");
// A share as a percentage without trailing noise (0.1 → "10").
const share = (x) => String(+(x * 100).toFixed(1));

// The local quarter-hours of the forecast's span that start an hour divisible by `every`
// (checked in the site's zone, so half-hour zones and daylight saving get true local hours).
function localHours(from, to, every) {
  const out = [];
  const q = 15 * 60000;
  for (let t = Math.ceil(from / q) * q; t <= to; t += q) {
    const hm = clock(t, false);
    if (hm.endsWith(":00") && Number(hm.slice(0, 2)) % every === 0) out.push({ t, hm, date: clock(t, true).slice(0, 10) });
  }
  return out;
}

function noForecast(why) {
  $("forecast-chart").textContent = `No forecast yet: ${why}`;
  set("forecast-ceiling", "—");
  $("forecast-basis").replaceChildren();
  state.forecastDrawn = false;
}

function drawForecast(f) {
  const host = $("forecast-chart");
  const steps = f.steps.map((s) => {
    const w = (s && s.available_w) || {};
    const kwOf = (v) => (typeof v === "number" ? v / 1000 : NaN);
    return {
      from: Date.parse(s && s.start), to: Date.parse(s && s.end),
      p10: kwOf(w.p10), p50: kwOf(w.p50), p90: kwOf(w.p90),
      gpus: Number(s && s.gpus_expected), unknown: Number(s && s.gpus_unknown),
    };
  });
  // A figure the chart cannot place would draw nothing and complain in the console: say so.
  if (!steps.every((s) => [s.from, s.to, s.p10, s.p50, s.p90].every(Number.isFinite) && s.to > s.from)) {
    noForecast("the gateway's answer has a quarter-hour without its times or figures.");
    return;
  }
  const W = 1200, H = 320, L = 64, R = 84, T = 22, B = 62;
  const from = steps[0].from, to = steps[steps.length - 1].to;
  const top = Math.max(1, ...steps.map((s) => s.p90)) * 1.08;
  const ystep = niceStep(top, 5);
  const maxKw = Math.ceil(top / ystep) * ystep;
  const x = (t) => L + ((t - from) / (to - from)) * (W - L - R);
  const y = (v) => H - B - (Math.max(0, v) / maxKw) * (H - T - B);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "presentation" });
  // Gridlines: kW, then every 3 local hours (days darker), labelled every 6 with the date at midnight.
  for (let v = 0; v <= maxKw + 1e-9; v += ystep) {
    svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e4e4e4" }));
    svg.appendChild(el("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 12, fill: "#333" }, v.toFixed(ystep < 1 ? 1 : 0)));
  }
  for (const h of localHours(from, to, 3)) {
    const midnight = h.hm === "00:00";
    svg.appendChild(el("line", { x1: x(h.t), x2: x(h.t), y1: T, y2: H - B, stroke: midnight ? "#9a9a9a" : "#e4e4e4" }));
    if (Number(h.hm.slice(0, 2)) % 6 !== 0) continue;
    svg.appendChild(el("text", { x: x(h.t), y: H - B + 16, "text-anchor": "middle", "font-size": 12, fill: "#333" }, h.hm));
    if (midnight) {
      svg.appendChild(el("text", { class: "forecast-date", x: x(h.t), y: H - B + 31, "text-anchor": "middle", "font-size": 12,
        "font-weight": 600, fill: "#111" }, h.date));
    }
  }
  // Now: the first quarter-hour (the flexibility curve now), dated.
  svg.appendChild(el("rect", { class: "forecast-now", x: x(from), y: T, width: Math.max(2, x(steps[0].to) - x(from)),
    height: H - T - B, fill: "#e69f00", "fill-opacity": 0.45 }));
  svg.appendChild(el("text", { x: x(from) + 2, y: T - 7, "font-size": 12, "font-weight": 600, fill: "#6b4500" },
    `now ${clock(from, true)}`));
  // The band, P10 (the trade's "P90") dashed, and the median, each quarter-hour a flat step.
  const stepped = (key) => steps.flatMap((s) => [`${x(s.from)},${y(s[key])}`, `${x(s.to)},${y(s[key])}`]);
  const band = el("polygon", { class: "forecast-band", points: stepped("p90").concat(stepped("p10").reverse()).join(" "),
    fill: "#0072b2", "fill-opacity": 0.2, stroke: "none" });
  band.appendChild(el("title", {}, "P10–P90: 8 outcomes in 10 fall in the band"));
  svg.appendChild(band);
  const p10 = el("polyline", { class: "forecast-p10", points: stepped("p10").join(" "), stroke: "#00466e", "stroke-width": 1.4,
    "stroke-dasharray": "5 3", fill: "none" });
  p10.appendChild(el("title", {}, "P10 = the trade's \u201cP90\u201d: the site sheds at least this 9 times in 10"));
  svg.appendChild(p10);
  const p50 = el("polyline", { class: "forecast-p50", points: stepped("p50").join(" "), stroke: "#0072b2", "stroke-width": 2.4, fill: "none" });
  p50.appendChild(el("title", {}, "P50 (median)"));
  svg.appendChild(p50);
  // The figures at 48 h, at the right end, kept apart when the band is narrow.
  const end = steps[steps.length - 1];
  let below = Infinity;
  for (const [key, name] of [["p10", "P10"], ["p50", "P50"], ["p90", "P90"]]) {
    const at = Math.min(y(end[key]) + 4, below - 13);
    below = at;
    svg.appendChild(el("text", { class: `forecast-end-${key}`, x: W - R + 6, y: at, "font-size": 12, fill: "#00466e",
      "font-weight": key === "p50" ? 700 : 400 }, `${name} ${end[key].toFixed(1)}`));
  }
  svg.appendChild(el("circle", { cx: x(from), cy: y(steps[0].p50), r: 4.5, fill: "#fff", stroke: "#b36b00", "stroke-width": 2.2 }));
  // Each quarter-hour's figures on hover.
  for (const s of steps) {
    const hover = el("rect", { x: x(s.from), y: T, width: x(s.to) - x(s.from), height: H - T - B, fill: "transparent" });
    hover.appendChild(el("title", {}, `${clock(s.from, true)}–${clock(s.to, false)}: P10 ${s.p10.toFixed(1)} · P50 ${s.p50.toFixed(1)} · `
      + `P90 ${s.p90.toFixed(1)} kW; ${s.gpus.toFixed(0)} GPUs busy, ${s.unknown.toFixed(0)} of them by jobs not known yet`));
    svg.appendChild(hover);
  }
  svg.appendChild(el("path", { d: `M${L} ${T} V${H - B} H${W - R}`, stroke: "#555", fill: "none" }));
  svg.appendChild(el("text", { class: "forecast-y-label", x: 14, y: T + (H - T - B) / 2, transform: `rotate(-90 14 ${T + (H - T - B) / 2})`,
    "text-anchor": "middle", "font-size": 12, fill: "#333" }, "kW sheddable at the meter"));
  svg.appendChild(el("text", { x: L + (W - L - R) / 2, y: H - 6, "text-anchor": "middle", "font-size": 12, fill: "#333" },
    `local time, ${state.tz}`));
  host.replaceChildren(svg);

  const words = objectiveWords(f.objective);
  set("forecast-ceiling", `Cost ceiling in use: at most ${share(f.cost_ceiling)} % of ${words} lost.`);
  const last = end;
  const least = Math.min(...steps.map((s) => s.p10));
  set("forecast-caption", `Made ${clock(Date.parse(f.generated_at), true)} (${state.tz}); the gateway makes a new one every 15 minutes. `
    + "Each figure is the most the site can shed at the revenue meter within the cost ceiling. "
    + `Now ${steps[0].p50.toFixed(1)} kW; at ${Math.round((to - from) / 3600000)} h P10 ${last.p10.toFixed(1)} · P50 ${last.p50.toFixed(1)} · P90 ${last.p90.toFixed(1)} kW. `
    + `The trade's \u201cP90\u201d (shed at least this 9 times in 10) is our P10: ${least.toFixed(1)} kW at the least over the span. `
    + "Estimates from the planner's curves, not measurements.");
  const basis = $("forecast-basis");
  basis.replaceChildren(...(f.basis || []).map((b) => {
    const li = document.createElement("li");
    li.textContent = b;
    return li;
  }));
  state.forecastDrawn = true;
}

// GET /v1/forecast: 404 (or another refusal, or an empty answer) until the gateway has made one.
async function loadForecast() {
  let r;
  try {
    r = await fetch("/v1/forecast");
  } catch (_) {
    if (state.forecastDrawn) set("forecast-caption", "The gateway did not answer; the forecast shown is the last one read.");
    else noForecast("the gateway did not answer.");
    return;
  }
  let body = null;
  try {
    const text = await r.text();
    body = text ? JSON.parse(text) : null;
  } catch (_) {
    body = null;
  }
  if (!r.ok) {
    // The gateway's own reason, without saying "no forecast yet" twice.
    const why = body && typeof body.detail === "string" ? body.detail.replace(/^no forecast yet:\s*/i, "") : "";
    noForecast(why ? `${why}.` : `the gateway answered HTTP ${r.status}.`);
  } else if (!body || !Array.isArray(body.steps) || body.steps.length === 0) {
    noForecast("the gateway's answer holds no quarter-hours.");
  } else {
    try {
      drawForecast(body);
    } catch (_) {
      noForecast("the gateway's answer could not be read.");
    }
  }
}

// ---- live updates ------------------------------------------------------------------------

function onState(message) {
  const m = JSON.parse(message.data);
  state.now = Date.parse(m.status.at);
  showStatus(m.status);
  showEvents(m.events);
  showPlan(m.plan);
  showJobs(m.jobs, m.status.jobs, m.plan);
  if (m.status.meter_w !== null && m.status.meter_w !== undefined) {
    const t = Date.parse(m.status.at);
    const last = state.points[state.points.length - 1];
    if (!last || t > last.t) {
      state.points.push({ t, meter: m.status.meter_w / 1000, ceiling: m.status.meter_ceiling_w === null ? null : m.status.meter_ceiling_w / 1000 });
    }
  }
  drawChart();
  // The curve changes with the jobs, what is known of them and the caps in force, not with
  // every reading: fetched every 20 updates, and at once while there is none yet or when an
  // event's caps came or went.
  if (state.updates % 20 === 0 || state.flexStale) loadFlexibility();
  state.updates += 1;
  const live = $("live");
  live.dataset.updates = String(state.updates);
  live.textContent = `updated ${clock(Date.parse(m.status.at), false)} (${state.updates} updates)`;
}

function connect() {
  // `?updates=N` on the page's address ends the live stream after N updates (for snapshots).
  const limit = Number(new URLSearchParams(location.search).get("updates")) || 0;
  const source = new EventSource(limit > 0 ? `/v1/stream?max=${limit}` : "/v1/stream");
  source.addEventListener("state", (message) => {
    onState(message);
    if (limit > 0 && state.updates >= limit) source.close();
  });
  source.onerror = () => {
    if (source.readyState !== EventSource.CLOSED) set("live", "reconnecting…");
  };
}

async function loadHistory() {
  try {
    const r = await fetch(`/v1/meter/history?seconds=${HISTORY_S}`);
    if (!r.ok) return;
    const h = await r.json();
    state.tz = h.time_zone || state.tz;
    state.points = h.points.map((p) => ({ t: Date.parse(p.at), meter: p.meter_w / 1000, ceiling: p.ceiling_w === null ? null : p.ceiling_w / 1000 }));
    if (state.points.length) state.now = state.points[state.points.length - 1].t;
    drawChart();
  } catch (_) {
    set("chart-caption", "The meter history could not be read; the chart fills as updates arrive.");
  }
}

async function verifyLedger() {
  set("ledger-verify", "verifying…");
  try {
    const r = await fetch("/v1/ledger/verify");
    const v = await r.json();
    if (!r.ok) { set("ledger-verify", v.detail || `HTTP ${r.status}`); return; }
    const out = $("ledger-verify");
    out.textContent = v.intact ? `intact: ${v.records} records` : `FAILED at record ${v.failed_at_record}: ${v.reason}`;
    out.className = v.intact ? "state-ok" : "state-bad";
  } catch (_) {
    set("ledger-verify", "the gateway did not answer");
  }
}

async function optOut(event) {
  event.preventDefault();
  const token = $("opt-token").value.trim();
  sessionStorage.setItem("flexgate-token", token);
  const body = { event_id: $("opt-event").value, operator: $("opt-operator").value, reason: $("opt-reason").value };
  try {
    const r = await fetch("/v1/operator/opt-out", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
    const answer = await r.json();
    set("opt-result", r.ok ? `Opted out of ${body.event_id}; recorded (ledger ${String(answer.log_checkpoint || "").slice(0, 16)}…).` : `Refused (${r.status}): ${answer.detail}`);
  } catch (_) {
    set("opt-result", "The gateway did not answer.");
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const saved = sessionStorage.getItem("flexgate-token");
  if (saved) $("opt-token").value = saved;
  $("verify-button").addEventListener("click", verifyLedger);
  $("opt-out").addEventListener("submit", optOut);
  loadHistory().then(() => {
    verifyLedger();
    connect();
    loadForecast();
    // The gateway makes a new forecast every 15 minutes; a minute is soon enough to show it.
    setInterval(loadForecast, 60000);
  });
});
