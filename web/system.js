// The system page (issue 21, SPEC RT-10): what this server process runs — VAD, end of turn,
// ASR, brain and TTS with engine, model, size, licence and where they run —, its database kind,
// version, uptime and live sessions, and the last minutes of turn latency as small charts,
// one per stage (p50 and p95 per minute). Everything comes from GET /api/system (member);
// the model facts live in runtime/model_facts.py, never here. Refreshed every REFRESH_MS.

import { api, el, errorText, isAdmin, signedIn } from "./api.js";

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 10_000;
const SVG = "http://www.w3.org/2000/svg";
const STAGE_LABELS = {
  endpoint: "end of speech → endpoint",
  asr: "endpoint → ASR final",
  brain: "ASR final → first token",
  tts: "first token → first audio",
  send: "first audio → sent",
  first_audio: "end of turn → first audio",
};

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

function duration(seconds) {
  const s = Math.floor(seconds);
  const parts = [[Math.floor(s / 86400), "d"], [Math.floor((s % 86400) / 3600), "h"], [Math.floor((s % 3600) / 60), "min"]];
  const shown = parts.filter(([n]) => n > 0).map(([n, unit]) => `${n} ${unit}`);
  return shown.length ? shown.join(" ") : `${s} s`;
}

/** Like duration, with tenths of a second under a minute (model and CPU time are often short). */
function preciseDuration(seconds) {
  return seconds < 60 ? `${seconds.toFixed(1)} s` : duration(seconds);
}

function size(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

function showProcess(system) {
  const db = system.database;
  const database = db.kind === "external" ? `external (${db.host})` : db.kind === "embedded" ? "embedded PostgreSQL" : "process memory (nothing survives a restart)";
  const facts = [
    ["version", system.version],
    ["uptime", duration(system.uptime_s)],
    ["started", new Date(system.started_at).toLocaleString()],
    ["live sessions", String(system.live_sessions)],
    ["waiting for a resume", String(system.waiting_for_resume)],
    ["connections", String(system.connections)],
    ["database", database],
  ];
  if (system.draining) facts.push(["state", "draining: takes no new sessions"]);
  $("process").replaceChildren(...facts.flatMap(([name, value]) => [el("dt", {}, name), el("dd", { "data-fact": name }, value)]));
}

function showModels(system) {
  const rows = system.models.map((m) => el(
    "tr",
    { "data-stage": m.stage, "data-plugin": m.plugin },
    el("td", { "data-label": "stage" }, m.stage),
    el("td", { "data-label": "engine" }, m.engine),
    el("td", { "data-label": "model" }, m.model),
    el("td", { "data-label": "size" }, size(m.size_bytes)),
    el("td", { "data-label": "licence" }, m.licence),
    el("td", { "data-label": "runs" }, m.runs === "remote" ? `remote · ${m.endpoint_host}` : "offline, in this process"),
    el("td", { class: "muted", "data-label": "from" }, m.provenance),
  ));
  $("models").tBodies[0].replaceChildren(...rows);
  const t = system.turn_detection;
  $("turn-detection").textContent = `Server defaults: end of turn after ${t.silence_ms} ms of silence, eagerness ${t.eagerness}, ${t.preemptive ? "the brain starts on the transcript at a pause" : "no preemptive brain"}; a session may set its own.`;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

/** One stage's small chart: a slot per minute of the window, p50 and p95 lines to one scale. */
function stageChart(stage, slots, windowMinutes) {
  const width = 300;
  const height = 70;
  const pad = 4;
  const points = slots.map((minute, i) => ({ i, at: minute.at, s: minute.stages[stage] })).filter((p) => p.s);
  const top = Math.max(1, ...points.map((p) => p.s.p95_ms));
  const x = (i) => pad + (i / Math.max(1, windowMinutes - 1)) * (width - 2 * pad);
  const y = (value) => height - pad - (value / top) * (height - 2 * pad);
  const line = (key, dashed) => svg("polyline", {
    points: points.map((p) => `${x(p.i).toFixed(1)},${y(p.s[key]).toFixed(1)}`).join(" "),
    class: `series ${key}`,
    fill: "none",
    "stroke-dasharray": dashed ? "4 3" : "none",
  });
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": `${stage} p50 and p95 per minute` },
    svg("line", { x1: pad, x2: width - pad, y1: height - pad, y2: height - pad, class: "axis" }),
    line("p95_ms", true),
    line("p50_ms", false),
  );
  for (const p of points) {
    chart.append(svg("circle", { cx: x(p.i).toFixed(1), cy: y(p.s.p95_ms).toFixed(1), r: 2.5, class: "point-p95" }));
    const dot = svg("circle", { cx: x(p.i).toFixed(1), cy: y(p.s.p50_ms).toFixed(1), r: 2.5, class: "point", "data-p50-ms": p.s.p50_ms, "data-p95-ms": p.s.p95_ms, "data-count": p.s.count });
    dot.append(svg("title", {}, `${p.at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}: p50 ${p.s.p50_ms} ms, p95 ${p.s.p95_ms} ms (${p.s.count} turns)`));
    chart.append(dot);
  }
  const last = points.at(-1);
  return el("div", { class: "stage-chart", "data-stage": stage },
    el("div", { class: "row spread small" },
      el("strong", {}, stage === "first_audio" ? "first audio" : stage),
      el("span", { class: "muted" }, STAGE_LABELS[stage] || ""),
      el("span", { class: "latest" }, last ? `now p50 ${Math.round(last.s.p50_ms)} · p95 ${Math.round(last.s.p95_ms)} ms` : "—"),
    ),
    chart,
    el("div", { class: "row spread muted tiny" }, el("span", {}, `${windowMinutes} min ago`), el("span", {}, `max ${Math.round(top)} ms`), el("span", {}, "now")),
  );
}

function showLatency(system, now) {
  const { latency } = system;
  $("window-minutes").textContent = String(latency.window_minutes);
  // Slot i of the window is the minute (window_minutes - 1 - i) minutes before this one.
  const thisMinute = Math.floor(now / 60000);
  const slots = Array.from({ length: latency.window_minutes }, (_, i) => ({
    at: new Date((thisMinute - (latency.window_minutes - 1 - i)) * 60000),
    stages: {},
  }));
  for (const minute of latency.minutes) {
    const index = latency.window_minutes - 1 - (thisMinute - Math.floor(Date.parse(minute.start) / 60000));
    if (index >= 0 && index < slots.length) slots[index].stages = minute.stages;
  }
  const seen = latency.stages.filter((stage) => latency.minutes.some((m) => m.stages[stage]));
  $("latency-empty").classList.toggle("hidden", seen.length > 0);
  $("latency-chart").replaceChildren(...seen.map((stage) => stageChart(stage, slots, latency.window_minutes)));
}

function showFailures(system) {
  const { latency } = system;
  $("failure-minutes").textContent = String(latency.window_minutes);
  const rows = latency.minutes
    .filter((minute) => Object.keys(minute.failures || {}).length > 0)
    .map((minute) => {
      const stages = Object.entries(minute.failures);
      const total = stages.reduce((sum, [, count]) => sum + count, 0);
      const at = new Date(Date.parse(minute.start)).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      return el("tr", { "data-failures": total },
        el("td", {}, at),
        el("td", {}, String(total)),
        el("td", {}, stages.map(([stage, count]) => `${stage} ${count}`).join(", ")),
      );
    });
  $("failures-empty").classList.toggle("hidden", rows.length > 0);
  $("failures").classList.toggle("hidden", rows.length === 0);
  $("failures").querySelector("tbody").replaceChildren(...rows);
}

function usd(micro) {
  return `$${(micro / 1e6).toFixed(micro && micro < 10_000 ? 6 : 2)}`;
}

function usageRow(cells, cls = "") {
  return el("tr", { class: cls }, ...cells.map((c) => el("td", {}, String(c))));
}

function usageCells(r, first) {
  return [
    ...first, r.responses, `${r.input_tokens} / ${r.output_tokens}`,
    `${duration(r.audio_in_ms / 1000)} / ${duration(r.audio_out_ms / 1000)}`,
    duration(r.asr_ms / 1000), r.tts_chars, r.tool_calls,
    preciseDuration(r.model_ms / 1000), preciseDuration(r.cpu_ms / 1000), usd(r.cost_micro_usd),
  ];
}

/** "the paid brain and TTS are", from the budget's `paid` stages. */
function paidStages(b) {
  const stages = Object.entries(b.paid || { brain: b.paid_brain }).filter(([, paid]) => paid).map(([stage]) => stage.toUpperCase() === "BRAIN" ? "brain" : stage.toUpperCase());
  if (!stages.length) return "nothing paid is";
  return `the paid ${stages.length > 1 ? `${stages.slice(0, -1).join(", ")} and ${stages.at(-1)} are` : `${stages[0]} is`}`;
}

// Usage and cost (SPEC OPS-6): GET /api/usage, the caller's own or (admins) the tenant's.
async function showUsage(admin) {
  const tenant = admin && $("usage-tenant").checked;
  let usage;
  try {
    usage = await api(`/api/usage?days=30${tenant ? "&scope=tenant" : ""}`);
  } catch (error) {
    notice(`Could not read usage: ${errorText(error)}`, "bad");
    return;
  }
  const stack = usage.prices.stack || {};
  $("usage-stack").textContent = `Priced: brain ${stack.brain || "?"}, ASR ${stack.asr || "?"}, TTS ${stack.tts || "?"}.`;
  const body = usage.rows.map((r) => usageRow(usageCells(r, [r.day, r.role_id, r.user_id])));
  $("usage").querySelector("tbody").replaceChildren(...body);
  $("usage").querySelector("tfoot").replaceChildren(usageRow(usageCells(usage.totals, ["total", "", ""]), "total"));
  $("usage").classList.toggle("hidden", usage.rows.length === 0);
  $("usage-empty").classList.toggle("hidden", usage.rows.length > 0);
  if (!admin) return;
  try {
    const b = await api("/api/usage/budget");
    const limits = [b.daily_micro_usd != null ? `${usd(b.daily_micro_usd)} a day` : "", b.monthly_micro_usd != null ? `${usd(b.monthly_micro_usd)} a month` : ""].filter(Boolean);
    $("usage-budget").textContent = `Spent today ${usd(b.today_micro_usd)}, this month ${usd(b.month_micro_usd)}. Budget: ${limits.join(", ") || "none"}${b.spent ? ` — spent: ${paidStages(b)} not called` : ""}${paidStages(b) === "nothing paid is" ? " (nothing here is paid: budgets stop nothing)" : ""}.`;
    $("usage-budget").classList.remove("hidden");
  } catch (error) {
    $("usage-budget").textContent = `Budget: ${errorText(error)}`;
  }
}

let refreshing = false; // one request at a time: a slow answer is not asked for again

async function refresh() {
  if (refreshing) return;
  refreshing = true;
  let system;
  try {
    system = await api("/api/system", { signal: AbortSignal.timeout(REFRESH_MS) });
  } catch (error) {
    notice(`Could not read the system's state: ${errorText(error)}`, "bad");
    return;
  } finally {
    refreshing = false;
  }
  notice("");
  showProcess(system);
  showModels(system);
  showLatency(system, Date.now());
  showFailures(system);
  $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function main() {
  let who;
  try {
    who = await signedIn("system.html");
  } catch (error) {
    notice(`Server unreachable: ${errorText(error)}`, "bad");
    return;
  }
  if (!who) return;
  const admin = isAdmin(who);
  $("refresh").addEventListener("click", () => Promise.all([refresh(), showUsage(admin)]));
  if (admin) $("usage-tenant").addEventListener("change", () => showUsage(admin));
  await Promise.all([refresh(), showUsage(admin)]);
  setInterval(() => Promise.all([refresh(), showUsage(admin)]), REFRESH_MS);
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
