"""The live page served at ``/``: one self-contained HTML document.

HTA runs on machines without Internet access, so the page loads nothing from
anywhere: its script and style are inline, and the chart is an SVG drawn by
hand. It polls ``status`` (relative, so it works behind a path prefix) every
second and redraws supply / in use / demand over time, the counters and the
decisions. ``window.htaPage`` tells a test (or a curious person) how many
points the chart drew and how many updates succeeded.
"""

from __future__ import annotations

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>HTA — live</title>
<link rel="icon" href="data:,">
<style>
  :root { --fg:#1f2328; --muted:#656d76; --line:#d0d7de; --bg:#f6f8fa; --card:#fff;
          --supply:#0969da; --inuse:#1a7f37; --demand:#bc4c00; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
         color:var(--fg); background:var(--bg); }
  header { padding:14px 24px; background:var(--card); border-bottom:1px solid var(--line);
           display:flex; align-items:baseline; gap:16px; flex-wrap:wrap; }
  header h1 { font-size:18px; margin:0; }
  header .run { color:var(--muted); }
  header .live { margin-left:auto; color:var(--muted); font-size:13px; }
  .dot { display:inline-block; width:8px; height:8px; border-radius:50%; background:#8c959f; margin-right:6px; }
  .dot.ok { background:#1a7f37; } .dot.bad { background:#cf222e; }
  main { padding:16px 24px; max-width:1200px; margin:0 auto; }
  .cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(170px, 1fr)); gap:12px; }
  .card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; }
  .card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
  .card .v { font-size:22px; font-weight:600; font-variant-numeric:tabular-nums; }
  .card .s { color:var(--muted); font-size:12px; }
  section { background:var(--card); border:1px solid var(--line); border-radius:8px; margin-top:16px; padding:12px 16px; }
  section h2 { font-size:14px; margin:0 0 8px; }
  .legend { display:flex; gap:18px; font-size:13px; color:var(--muted); margin-bottom:4px; }
  .legend i { display:inline-block; width:18px; height:3px; vertical-align:middle; margin-right:6px; }
  svg text { font:11px system-ui, "DejaVu Sans", sans-serif; fill:var(--muted); }
  .error { display:none; background:#ffebe9; border:1px solid #ff8182; color:#82071e; border-radius:8px;
           padding:8px 14px; margin-bottom:12px; }
  table { border-collapse:collapse; width:100%; font-size:13px; }
  th { text-align:left; color:var(--muted); font-weight:500; border-bottom:1px solid var(--line); padding:4px 8px; }
  td { border-bottom:1px solid #eaeef2; padding:4px 8px; vertical-align:top; font-variant-numeric:tabular-nums; }
  td.reason { color:var(--muted); }
  .kind { border-radius:10px; padding:0 8px; font-size:12px; font-weight:600; }
  .kind.up { background:#dafbe1; color:#1a7f37; } .kind.down { background:#fff1e5; color:#bc4c00; }
  .kind.none { background:#eaeef2; color:#656d76; }
  .empty { color:var(--muted); font-style:italic; }
  .v.capped { color:#8250df; }
  .plan { display:none; background:var(--card); border:1px solid var(--line); border-radius:8px; padding:8px 14px;
          margin-top:12px; font-variant-numeric:tabular-nums; }
  .plan .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; margin-right:10px; }
  .plan.late { background:#fff8c5; border-color:#d4a72c; color:#7d4e00; font-weight:600; }
</style>
</head>
<body>
<header>
  <h1>HTA</h1><span class="run" id="run">connecting…</span>
  <span class="live"><span class="dot" id="dot"></span><span id="live">waiting for the first status</span></span>
</header>
<main>
  <div class="error" id="error"></div>
  <div class="cards">
    <div class="card"><div class="k">elapsed</div><div class="v" id="elapsed">—</div><div class="s" id="pid"></div></div>
    <div class="card"><div class="k">tasks</div><div class="v" id="tasks">—</div><div class="s" id="tasks-s"></div></div>
    <div class="card"><div class="k">workers</div><div class="v" id="workers">—</div><div class="s" id="workers-s"></div></div>
    <div class="card"><div class="k">latency L</div><div class="v" id="latency">—</div><div class="s" id="latency-s"></div></div>
    <div class="card"><div class="k">cores</div><div class="v" id="cores">—</div><div class="s" id="cores-s"></div></div>
    <div class="card"><div class="k">waste / shortage</div><div class="v" id="waste">—</div><div class="s" id="waste-s"></div></div>
  </div>
  <div class="plan" id="plan"><span class="k">plan</span><span id="plan-line"></span></div>
  <section>
    <h2>Cores over time</h2>
    <div class="legend"><span><i style="background:var(--supply)"></i>supply</span>
      <span><i style="background:var(--inuse)"></i>in use</span>
      <span><i style="background:var(--demand)"></i>demand</span>
      <span><i style="background:#8250df"></i>cap (--max-workers)</span></div>
    <svg id="chart" viewBox="0 0 1000 300" width="100%" role="img" aria-label="supply, in use and demand cores over time"></svg>
  </section>
  <section>
    <h2>Decisions <span class="s" id="decisions-s" style="color:var(--muted);font-weight:400"></span></h2>
    <table><thead><tr><th>t</th><th>kind</th><th>action</th><th>target</th><th>L</th><th>reason</th></tr></thead>
    <tbody id="decisions"><tr><td colspan="6" class="empty">no decision yet</td></tr></tbody></table>
  </section>
</main>
<script>
"use strict";
window.htaPage = { points: 0, updates: 0, failures: 0 };
const $ = (id) => document.getElementById(id);
const NS = "http://www.w3.org/2000/svg";
const fmt = (v, d = 1) => (v == null ? "—" : Number(v).toFixed(d));
function dur(s) {
  if (s == null) return "—";
  s = Math.max(0, s);
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60), r = Math.floor(s % 60);
  if (m < 60) return m + " min " + String(r).padStart(2, "0") + " s";
  return Math.floor(m / 60) + " h " + String(m % 60).padStart(2, "0") + " min";
}
function nice(max) {
  if (max <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 2, 2.5, 5, 10]) if (max / (m * p) <= 5) return m * p;
  return 10 * p;
}
function el(name, attrs, text) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text != null) e.textContent = text;
  return e;
}
function clock(t) {
  const m = Math.floor(t / 60), r = Math.round(t % 60);
  return m + ":" + String(r).padStart(2, "0");
}
function timeStep(span) {
  for (const st of [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400])
    if (span / st <= 8) return st;
  return 28800;
}
function drawChart(series, cap) {
  const svg = $("chart"), W = 1000, H = 300, L = 48, R = 14, T = 26, B = 30;
  svg.replaceChildren();
  const t0 = series.length ? series[0][0] : 0, t1 = series.length ? Math.max(series[series.length - 1][0], t0 + 1) : 60;
  let vmax = 1;
  for (const p of series) vmax = Math.max(vmax, p[1], p[2], p[3]);
  if (cap) vmax = Math.max(vmax, cap.cores);
  const ystep = nice(vmax), ymax = Math.ceil(vmax * 1.05 / ystep) * ystep;
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0), y = (v) => T + (H - T - B) * (1 - v / ymax);
  for (let v = 0; v <= ymax + 1e-9; v += ystep) {
    svg.append(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: v ? "#eaeef2" : "#d0d7de" }));
    svg.append(el("text", { x: L - 8, y: y(v) + 4, "text-anchor": "end" }, String(+v.toFixed(2))));
  }
  const xstep = timeStep(t1 - t0);
  for (let t = Math.ceil(t0 / xstep) * xstep; t <= t1 + 1e-9; t += xstep) {
    svg.append(el("line", { x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4, stroke: "#d0d7de" }));
    svg.append(el("text", { x: x(t), y: H - B + 17, "text-anchor": "middle" }, clock(t)));
  }
  svg.append(el("text", { x: L - 8, y: 12, "text-anchor": "end" }, "cores"));
  svg.append(el("text", { x: W - R, y: 12, "text-anchor": "end" }, "elapsed (min:s)"));
  if (!series.length) {
    svg.append(el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no observation yet"));
    window.htaPage.points = 0;
    return;
  }
  const step = (i) => {
    let d = "M" + x(series[0][0]).toFixed(1) + " " + y(series[0][i]).toFixed(1);
    for (let k = 1; k < series.length; k++)
      d += "H" + x(series[k][0]).toFixed(1) + "V" + y(series[k][i]).toFixed(1);
    return d;
  };
  // supply also as a light area, so the cores paid for stay visible where in use covers its line
  const base = y(0).toFixed(1);
  svg.append(el("path", { d: step(1) + "V" + base + "H" + x(series[0][0]).toFixed(1) + "Z", fill: "rgba(9,105,218,0.10)",
                          stroke: "none", class: "area supply" }));
  if (cap) {  // the most cores the run may have: a shortage above it is the cap's, not the policy's
    svg.append(el("line", { x1: L, x2: W - R, y1: y(cap.cores), y2: y(cap.cores), stroke: "#8250df",
                            "stroke-width": 1.5, "stroke-dasharray": "2 4", class: "cap" }));
    svg.append(el("text", { x: W - R, y: y(cap.cores) - 5, "text-anchor": "end", fill: "#8250df" },
                 "cap: " + cap.max_workers + " workers (" + (cap.set_by || "--max-workers") + ")"));
  }
  // supply is drawn wide and in use narrow on top: where they are equal both stay visible
  const lines = [[3, "var(--demand)", "demand", "6 4", 2], [1, "var(--supply)", "supply", "", 4.5],
                 [2, "var(--inuse)", "in-use", "", 1.8]];
  for (const [i, color, name, dash, width] of lines)
    svg.append(el("path", { d: step(i), fill: "none", stroke: color, "stroke-width": width, "stroke-dasharray": dash,
                            "stroke-linejoin": "round", "stroke-opacity": name === "supply" ? 0.55 : 1,
                            class: "series " + name, "data-points": series.length }));
  window.htaPage.points = series.length;
}
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.append(td); return td; }
function drawDecisions(s) {
  const body = $("decisions");
  body.replaceChildren();
  const ds = s.decisions.slice().reverse();
  if (!ds.length) { const tr = document.createElement("tr"); cell(tr, "no decision yet", "empty").colSpan = 6; body.append(tr); }
  for (const d of ds) {
    const tr = document.createElement("tr");
    cell(tr, dur(d.t));
    const k = document.createElement("span"); k.className = "kind " + d.kind; k.textContent = d.kind;
    cell(tr, "").append(k);
    const act = [];
    if (d.add) act.push("add " + d.add);
    if (d.drain.length) act.push("drain " + d.drain.join(", "));
    if (d.remove.length) act.push("remove " + d.remove.join(", "));
    const held = d.held_back ? (d.held_by && d.held_by.startsWith("--max-workers") ? "at the cap (" + d.held_by + ")"
                                                                               : "by " + (d.held_by || "the backend")) : "";
    if (d.held_back && d.add) act[0] += ", " + d.held_back + " more held " + held;
    cell(tr, act.join("; ") || (d.held_back ? "hold " + held : "hold"));
    cell(tr, d.target == null ? "—" : d.target);
    cell(tr, d.latency_s == null ? "—" : fmt(d.latency_s) + " s");
    cell(tr, d.reason, "reason");
    body.append(tr);
  }
  const c = s.decision_counts;
  $("decisions-s").textContent = "— " + c.up + " up, " + c.down + " down, " + c.none + " hold (last " + s.decisions.length + " shown)";
}
function render(s) {
  const r = s.run;
  $("run").textContent = (r.workflow || "—") + " · policy " + r.policy + " · backend " + r.backend;
  $("elapsed").textContent = dur(s.elapsed_s);
  $("pid").textContent = "pid " + r.pid;
  const t = s.tasks;
  $("tasks").textContent = t.done + " done";
  $("tasks-s").textContent = t.running + " running, " + t.waiting + " waiting" + (t.failed ? ", " + t.failed + " failed" : "");
  const connected = s.workers.filter((w) => w.state !== "pending").length, pending = s.workers.length - connected;
  const idle = s.workers.filter((w) => w.state === "idle").length;
  $("workers").textContent = connected + " connected";
  $("workers-s").textContent = pending + " on their way, " + idle + " idle" + (s.cap ? "; at most " + s.cap.max_workers : "");
  const atCap = s.cap && s.cap.at_cap;
  $("workers").textContent = connected + " connected" + (atCap ? " · at the cap" : "");
  $("workers").className = "v" + (atCap ? " capped" : "");
  $("latency").textContent = fmt(s.latency.estimate_s) + " s";
  $("latency-s").textContent = s.latency.count ? "median of " + Math.min(s.latency.count, 10) + " (" + s.latency.count + " measured)" : "prior (none measured yet)";
  $("cores").textContent = fmt(s.cores.in_use) + " / " + fmt(s.cores.supply);
  $("cores-s").textContent = "in use / supplied; demand " + fmt(s.cores.demand);
  $("waste").textContent = fmt(s.accounting.waste_core_s, 0) + " / " + fmt(s.accounting.shortage_core_s, 0);
  $("waste-s").textContent = "core·s so far" + (s.accounting.utilization == null ? "" : ", utilisation " + Math.round(100 * s.accounting.utilization) + " %");
  const err = $("error");
  err.style.display = s.last_error ? "block" : "none";
  err.textContent = s.last_error ? "last step failed: " + s.last_error + " (" + s.step_failures + " failures so far)" : "";
  const plan = $("plan");  // (--deadline or --budget; an older HTA's status has no plan)
  plan.style.display = s.plan ? "block" : "none";
  plan.className = "plan" + (s.plan && !s.plan.feasible ? " late" : "");
  $("plan-line").textContent = s.plan ? s.plan.line : "";
  drawChart(s.series, s.cap);
  drawDecisions(s);
}
async function poll() {
  let s;
  try {
    const res = await fetch("status" + location.search, { cache: "no-store" });  // (?token=… passed on)
    if (!res.ok) throw new Error("HTTP " + res.status);
    s = await res.json();
  } catch (e) {  // HTA went away (the run ended) or answered badly: say so, keep trying
    window.htaPage.failures++;
    $("dot").className = "dot bad";
    $("live").textContent = "HTA is not answering (the run may have ended)";
    setTimeout(poll, 1000);
    return;
  }
  setTimeout(poll, 1000);
  render(s);  // a bug here must reach the console, not pass for a lost connection
  window.htaPage.updates++;
  $("dot").className = "dot ok";
  $("live").textContent = "live · updated " + new Date().toLocaleTimeString();
}
drawChart([]);
poll();
</script>
</body>
</html>
"""
