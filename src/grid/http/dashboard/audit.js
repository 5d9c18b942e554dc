// flexgate dashboard: one event's audit, rebuilt by the gateway from its live ledger.
"use strict";

const $ = (id) => document.getElementById(id);
const set = (id, text) => { const el = $(id); if (el) el.textContent = text; };
const num = (v, digits) => (v === null || v === undefined || !Number.isFinite(v) ? "—" : v.toFixed(digits));

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  row.appendChild(td);
}

// A date and time in the site's zone as ISO 8601 writes them (2026-12-04 20:35).
function localTime(iso, tz) {
  try {
    const p = {};
    new Intl.DateTimeFormat("en-US", { timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
      minute: "2-digit", hourCycle: "h23" }).formatToParts(new Date(iso)).forEach((x) => { p[x.type] = x.value; });
    return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}`;
  } catch (_) { return iso; }
}

function show(a) {
  const tz = a.time_zone || "UTC";
  const intervals = a.intervals || [];
  const compliance = intervals.map((i) => i.compliance).filter((c) => c !== null && c !== undefined);
  set("compliance", compliance.length ? `${(Math.min(...compliance) * 100).toFixed(0)} %` : "—");
  const delivered = intervals.map((i) => i.delivered_reduction_kw).filter((v) => v !== null && v !== undefined);
  set("delivered", delivered.length ? num(delivered.reduce((s, v) => s + v, 0) / delivered.length, 1) : "—");
  const shortfall = intervals.map((i) => i.shortfall_kw).filter((v) => v !== null && v !== undefined);
  set("shortfall", shortfall.length ? num(Math.max(...shortfall), 1) : "—");
  const b = a.baseline;
  set("baseline", num(b.kw, 1));
  set("baseline-method", b.method === "pjm_economic_cbl"
    ? `PJM Economic CBL (high ${b.cbl.x_of_y[0]} of ${b.cbl.x_of_y[1]}, ${b.cbl.time_zone}); meter before/after ${num(b.before_after_kw, 1)} kW`
    : `meter before/after (no PJM CBL: ${b.cbl_unavailable || "not computed"})`);
  const body = $("intervals").tBodies[0];
  body.replaceChildren();
  intervals.forEach((i) => {
    const tr = document.createElement("tr");
    cell(tr, String(i.index));
    cell(tr, localTime(i.start, tz));
    cell(tr, localTime(i.end, tz));
    cell(tr, num(i.ceiling_kw, 1), "num");
    cell(tr, num(i.mean_meter_kw, 1), "num");
    cell(tr, num(i.max_meter_kw, 1), "num");
    cell(tr, i.compliance === null || i.compliance === undefined ? "—" : (i.compliance * 100).toFixed(0), "num");
    cell(tr, num(i.delivered_reduction_kw, 1), "num");
    cell(tr, num(i.shortfall_kw, 1), "num");
    cell(tr, String(i.modelled_samples), "num");
    body.appendChild(tr);
  });
  if (!intervals.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = 10;
    td.className = "muted";
    td.textContent = "No interval has started.";
    tr.appendChild(td);
    body.appendChild(tr);
  }
  set("received", String(a.received.length));
  set("acks", a.acks.map((k) => `rev ${k.revision}: opt ${k.opt}`).join("; ") || "—");
  set("plans", String(a.plans.length));
  set("dispatches", String(a.dispatches.length));
  set("trims", String(a.trims.length));
  // Each kind counted, e.g. "reapplied 2, raised_out_of_band 1"; the JSON has every record.
  const faults = new Map();
  for (const f of a.cap_faults || []) faults.set(f.kind, (faults.get(f.kind) || 0) + 1);
  set("cap-faults", faults.size ? [...faults].map(([k, n]) => `${k.replaceAll("_", " ")} ${n}`).join(", ") : "none");
  set("fallbacks", a.fallbacks.length ? a.fallbacks.join(", ") : "none");
  set("opt-outs", a.opt_outs.length ? a.opt_outs.map((o) => `${o.operator}: ${o.reason}`).join("; ") : "none");
  set("promised", a.promised ? num(a.promised.progress_lost * 100, 1) : "—");
  const kept = a.throughput && a.throughput.measured_kept;
  set("measured-progress", kept ? num(kept.progress_kept_share * 100, 1) : "—");
  set("measured-tokens", kept ? num(kept.tokens_kept_share * 100, 1) : "—");
  set("measured-jobs", kept ? String(kept.jobs) : "none measured both ways");
}

document.addEventListener("DOMContentLoaded", async () => {
  const id = decodeURIComponent(location.pathname.split("/").pop() || "");
  set("event-id", id);
  document.title = `flexgate: audit of ${id}`;
  const base = `/v1/events/${encodeURIComponent(id)}/audit`;
  $("json-link").href = base;
  $("chart").src = `${base}.svg`;
  try {
    const r = await fetch(base);
    const a = await r.json();
    if (!r.ok) { set("loading", a.detail || `HTTP ${r.status}`); return; }
    show(a);
    set("loading", "Rebuilt from the ledger.");
  } catch (_) {
    set("loading", "The gateway did not answer.");
  }
});
