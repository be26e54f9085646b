// The per-turn latency timeline under each assistant message (SPEC RT-10, issue 21).
//
// Theory of operation
// -------------------
// Rule 1. The input is the server's `openrealtime.turn.latency` event: its `latency_ms` marks
//         are milliseconds after the end of the person's speech (`origin: "vad_end"`), or
//         after the commit of a typed turn. Nothing is measured in the browser.
// Rule 2. The stages are runtime/metrics.py `turn_stages`, line for line (the Prometheus
//         histograms and the system page's window use the same): endpoint (end of speech →
//         commit), asr (→ final transcript), brain (→ first token), tts (→ first synthesized
//         audio), send (→ first audio frame sent). A stage whose end mark is missing is left
//         out; a brain that started before the commit (preempted) has a stage of no length.
// Rule 3. Drawn to scale within the turn: the bar spans 0 … the last stage's end; each stage
//         is a segment at its start with its length. The numbers are on hover (`title`) and in
//         `data-*` attributes; the whole time to first audio is written beside the bar.
// Rule 4. An interrupted answer says how much of it was heard: "heard N.N s of M.M s" when
//         the page played it (the WebSocket's player counts both), else — over WebRTC, where
//         the browser plays a track and counts nothing — the heard words of the answer's.

import { el } from "./api.js";

export const STAGE_LABELS = {
  endpoint: "end of speech → endpoint",
  asr: "endpoint → ASR final",
  brain: "ASR final → first token",
  tts: "first token → first audio",
  send: "first audio → sent",
};

/** runtime/metrics.py turn_stages (rule 2): [{name, start_ms, end_ms}]. */
export function turnStages(latencyMs) {
  const stages = [];
  const committed = latencyMs.committed ?? 0;
  if (committed > 0) stages.push({ name: "endpoint", start_ms: 0, end_ms: committed });
  const asrFinal = latencyMs.asr_final;
  if (asrFinal !== undefined) stages.push({ name: "asr", start_ms: committed, end_ms: Math.max(committed, asrFinal) });
  const heard = asrFinal !== undefined ? Math.max(committed, asrFinal) : committed;
  const firstToken = latencyMs.brain_first_token;
  if (firstToken !== undefined) stages.push({ name: "brain", start_ms: Math.min(heard, firstToken), end_ms: firstToken });
  const tts = latencyMs.tts_first_audio;
  if (tts !== undefined && firstToken !== undefined) {
    stages.push({ name: "tts", start_ms: firstToken, end_ms: Math.max(firstToken, tts) });
  }
  const sent = latencyMs.first_audio_sent;
  if (sent !== undefined && tts !== undefined) stages.push({ name: "send", start_ms: tts, end_ms: Math.max(tts, sent) });
  return stages;
}

const ms = (value) => `${Math.round(value)} ms`;
const seconds = (value) => `${(value / 1000).toFixed(1)} s`;

/** The timeline element of one turn's latency event (rule 3). */
export function renderTimeline(event) {
  const stages = turnStages(event.latency_ms);
  const end = Math.max(0, ...stages.map((s) => s.end_ms));
  const from = event.origin === "vad_end" ? "end of speech" : "commit";
  const bar = el("div", { class: "timeline-bar" });
  for (const stage of stages) {
    const length = stage.end_ms - stage.start_ms;
    const segment = el("span", {
      class: `stage stage-${stage.name}`,
      "data-stage": stage.name,
      "data-ms": String(Math.round(length * 100) / 100),
      "data-start-ms": String(stage.start_ms),
      "data-end-ms": String(stage.end_ms),
      title: `${stage.name}: ${ms(length)} (${STAGE_LABELS[stage.name]}; ${ms(stage.start_ms)}–${ms(stage.end_ms)} after ${from})`,
    });
    segment.style.left = `${end > 0 ? (stage.start_ms / end) * 100 : 0}%`;
    segment.style.width = `${end > 0 ? (length / end) * 100 : 0}%`;
    bar.append(segment);
  }
  const sent = event.latency_ms.first_audio_sent;
  const total = el(
    "span",
    { class: "timeline-total" },
    sent !== undefined ? `first audio ${ms(sent)}` : `${ms(end)}`,
    event.preempted ? " · preempted" : "",
  );
  const node = el("div", {
    class: "timeline",
    "data-response-id": event.response_id,
    "data-generation": String(event.generation),
    title: `${from} → first audio: ${stages.map((s) => `${s.name} ${ms(s.end_ms - s.start_ms)}`).join(", ")}`,
  }, bar, total);
  return node;
}

/** Put (or replace) the turn's timeline in the assistant message `node`. */
export function attachTimeline(node, event) {
  if (!node) return;
  const old = node.querySelector(".timeline");
  const timeline = renderTimeline(event);
  if (old) old.replaceWith(timeline);
  else node.append(timeline);
}

/** Rule 4: "heard N.N s of M.M s" (played and received audio), or words when unknown. */
export function heardText({ heardMs = null, totalMs = null, heardTextValue = "", fullText = "" }) {
  if (heardMs !== null && totalMs !== null && totalMs > 0) return `heard ${seconds(heardMs)} of ${seconds(totalMs)}`;
  const words = (text) => (text.trim() ? text.trim().split(/\s+/u).length : 0);
  return `heard ${words(heardTextValue)} of ${words(fullText)} words`;
}

/** Mark the message `node` as interrupted with how much was heard (rule 4). */
export function markHeard(node, heard) {
  if (!node) return;
  let line = node.querySelector(".heard");
  if (!line) {
    line = el("span", { class: "heard" });
    node.append(line);
  }
  line.textContent = heardText(heard);
  if (heard.heardMs !== null && heard.heardMs !== undefined) line.dataset.heardMs = String(Math.round(heard.heardMs));
  if (heard.totalMs !== null && heard.totalMs !== undefined) line.dataset.totalMs = String(Math.round(heard.totalMs));
}
