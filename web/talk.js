// The talk page (SPEC WEB-1, RES-2, RES-5, CONV-1 … CONV-3, RTC-2): one voice session at a time
// over realtime.js, microphone and playback from audio.js, the transcript saved by records.js.
//
// Transport: realtime.js talks WebRTC when it can and a WebSocket otherwise; the connection
// pill says which. Everything here is the same over both but the audio: over the WebSocket the
// page plays the answer (Player) and reports what it played; over WebRTC the answer is a remote
// track played by an <audio> element, and the server knows what it played out.
//
// Identity: "New conversation" makes a new page record and a new thread; "continue" (from
// history: index.html?continue=<record id>) keeps the record id and asks the server to continue
// its thread (requested_thread_id + previous_voice_session_id). Transcript entries are keyed by
// voice session + generation / item id, and earlier messages by their record index, so a new
// session's generation 1 can never overwrite an old session's message.
//
// Thread memory: the panel beside the transcript (thread_memory.js) shows the memory of the
// record's thread — from the session's start, or of a continued record at once — and follows
// `openrealtime.thread_memory.updated` while a session runs.
//
// The conversation itself is data (conversation.js: `reduce(state, event)`, no DOM): every
// server event and every change the page makes to the transcript goes through `dispatch`,
// which renders the entries that changed and carries out the reducer's effects.
//
// Turn display: level_meter.js draws the microphone's level (from the capture worklet, never
// sent) and who has the turn (from the server's events); timeline.js puts each answer's
// latency timeline (openrealtime.turn.latency) under it, and how much of an interrupted
// answer was heard.

import { api, apiBase, downloadJson, el, errorText, listRoles, signedIn, token } from "./api.js";
import { Microphone, Player } from "./audio.js";
import { LevelMeter, TurnIndicator } from "./level_meter.js";
import { RealtimeConnection, realtimeUrl } from "./realtime.js";
import { newRecord, RecordSaver } from "./records.js";
import { ThreadMemoryPanel } from "./thread_memory.js";
import { attachTimeline, markHeard } from "./timeline.js";
import { ApprovalPanel } from "./approvals.js";
import { HEARD_NOTE, initialState, reduce } from "./conversation.js";

const $ = (id) => document.getElementById(id);
const PLAYBACK_REPORT_MS = 250;
const TURNS_KEPT = 100; // per-generation facts (audioMs, latency) kept for the latest turns
const TRANSPORT_LABELS = { webrtc: "WebRTC", websocket: "WebSocket" };

const STATE_LABELS = {
  idle: "not connected",
  connecting: "connecting…",
  connected: "connected",
  reconnecting: "reconnecting…",
  lost: "session ended",
  failed: "disconnected",
  closed: "closed",
};

// Everything the page knows, also reachable as window.openrealtime for diagnostics and tests.
const talk = {
  conn: null,
  session: null,
  mic: null,
  player: null,
  saver: null,
  record: null,
  continuing: false,
  micPaused: false, // the person paused the microphone: the page sends no audio
  conversation: initialState(), // the transcript and the session's turns (conversation.js)
  nodes: new Map(), // transcript key → its element
  interrupted: new Set(),
  lastInterruption: null,
  interruptions: {},
  playbackReports: [],
  reported: {},
  sessionJournaled: false,
  sessionStart: 0,
  ready: false, // the session is set up (record tracked, player running): shown as connected
  recording: Promise.resolve(),
  audioMs: {}, // generation → ms of answer audio received (WebSocket), for "heard N of M s"
  latency: {}, // generation → its openrealtime.turn.latency event (this session)
};
Object.defineProperties(talk, { // the conversation's facts, read where tests and diagnostics look
  keyPrefix: { get: () => talk.conversation.prefix }, // session id (+ ~epoch)
  serverPaused: { get: () => talk.conversation.serverPaused }, // openrealtime.input.paused
  outputAudio: { get: () => talk.conversation.outputAudio }, // WebRTC: output_audio_buffer.*
});
window.openrealtime = talk;

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

function setConnection(state, detail = {}) {
  const pill = $("connection");
  pill.dataset.state = state;
  let label = STATE_LABELS[state] || state;
  const kind = talk.conn && talk.conn.kind;
  if (state === "connected" && kind) label = `connected · ${TRANSPORT_LABELS[kind]}`;
  if (state === "connected" && talk.conn.resumes > 0) label += ` (resumed ×${talk.conn.resumes})`;
  if (state === "failed" && detail.code) label = `disconnected (${detail.code})`;
  pill.textContent = label;
  pill.dataset.transport = state === "idle" ? "" : kind || "";
  const fallback = talk.conn && talk.conn.fallback;
  pill.title = fallback && kind === "websocket" ? `WebRTC did not connect (${fallback.code}): using a WebSocket` : "";
  const live = state === "connected";
  if (talk.indicator && (live || state === "idle")) talk.indicator.signal(live ? "connected" : "closed");
  $("type-text").disabled = !live;
  $("type-send").disabled = !live;
  $("mic").disabled = !live || !talk.mic;
}

// ------------------------------------------------------------------ transcript

function scrollDown() {
  const box = $("transcript");
  box.scrollTop = box.scrollHeight;
}

/** The one way the conversation changes (conversation.js rule 1): reduce, render, effects. */
function dispatch(event) {
  const before = talk.conversation;
  const { state, effects } = reduce(before, event);
  talk.conversation = state;
  if (state.entries !== before.entries) render(before.entries, state.entries);
  for (const effect of effects) run(effect);
}

function render(before, after) {
  for (const [key, node] of talk.nodes) {
    if (!after.has(key)) {
      node.remove();
      talk.nodes.delete(key);
    }
  }
  let shown = false;
  for (const [key, entry] of after) {
    if (before.get(key) === entry && talk.nodes.has(key)) continue;
    renderEntry(key, entry);
    shown = shown || entry.role !== "divider";
  }
  if (shown) scrollDown();
}

function renderEntry(key, entry) {
  let node = talk.nodes.get(key);
  if (!node) {
    if (entry.role === "divider") node = el("div", { class: "divider" }, entry.text);
    else {
      node = el("div", { class: `msg ${entry.role}`, "data-key": key, "data-role": entry.role });
      node.append(el("span", { class: "text" }), el("span", { class: "note hidden" }));
    }
    talk.nodes.set(key, node);
    $("transcript").append(node);
  }
  if (entry.role === "divider") return;
  node.querySelector(".text").textContent = entry.text;
  node.classList.toggle("partial", entry.partial);
  node.classList.toggle("earlier", entry.earlier);
  const note = node.querySelector(".note");
  note.textContent = entry.note;
  note.classList.toggle("hidden", !entry.note);
}

/** Carry out one of the reducer's effects (conversation.js rule 4). */
function run(effect) {
  switch (effect.kind) {
    case "record":
      recordMessage(effect.role, effect.text);
      break;
    case "player":
      if (!talk.player) break;
      if (effect.action === "end") talk.player.end(effect.generation);
      else if (effect.action === "pause") talk.player.pause();
      else talk.player.resume();
      break;
    case "interrupted":
      interrupt(effect.generation, effect.reason);
      break;
    case "heard":
      dispatch({ type: "page.note", key: effect.key, text: interruptionNote(effect.response.generation) });
      showHeard(effect.key, effect.response);
      break;
    case "playback":
      $("playback").textContent = effect.text;
      break;
    case "latency":
      $("playback").dataset.latency = String(effect.event.latency_ms.first_audio_sent ?? "");
      keepLatest(talk.latency);
      talk.latency[effect.generation] = effect.event;
      attachTimeline(talk.nodes.get(effect.key), effect.event);
      break;
    case "notice":
      notice(effect.text, effect.level);
      break;
    case "thread-memory":
      if (talk.threadMemory) talk.threadMemory.live(effect.event);
      break;
    case "moved": // a turn was journaled: the thread's head moves on (its memory maybe not)
      if (talk.threadMemory) talk.threadMemory.conversationMoved();
      break;
    default:
      break;
  }
}

/** Add a final message to the page record; calls are queued so the order is kept. */
function recordMessage(role, text) {
  if (!text) return talk.recording;
  const { record, saver, session } = talk;
  const at = new Date().toISOString();
  talk.recording = talk.recording.then(async () => {
    if (!talk.sessionJournaled && session) {
      // From now on this session appears in the thread's journal: a later "continue" names it.
      talk.sessionJournaled = true;
      await saver.update(record.id, { voice_session_id: session.id, thread_id: session.thread_id });
    }
    await saver.append(record.id, { role, text, at });
  });
  return talk.recording;
}

// ------------------------------------------------------------------ saving

function showSaveStatus(status) {
  if (!talk.record || status.id !== talk.record.id) return;
  const labels = {
    saved: `saved · ${status.confirmed} messages`,
    saving: "saving…",
    pending: "not saved yet",
    retrying: `not saved (${status.error || "offline"}) · retrying in ${Math.ceil(status.retryInMs / 1000)} s · kept on this device`,
    conflict: "not saved: conflict",
    rejected: "not saved: rejected",
  };
  $("save-state").textContent = labels[status.state] || status.state;
  $("save-state").dataset.state = status.state;
  const stopped = status.state === "conflict" || status.state === "rejected";
  $("save-problem").classList.toggle("hidden", !stopped);
  if (stopped) {
    $("save-problem-text").textContent =
      `Automatic saving stopped: ${status.error}. Your copy is kept on this device; export it before discarding. `;
  }
}

// ------------------------------------------------------------------ session

function onEvent(event) {
  talk.indicator.signal(event.type);
  if (talk.approvals) talk.approvals.onEvent(event); // tool approvals (web/approvals.js)
  dispatch(event);
}

/**
 * After a resume the server could not replay (continued from the journal on another process,
 * or the replay window was exceeded): drop half-played audio and show this session's turns as
 * the journal has them instead of what the page had; the page record follows. Keys get a new
 * prefix, so generation numbers the server hands out from now on never collide with old ones.
 */
async function reconcile(account) {
  if (talk.player) await talk.player.clear();
  talk.interrupted = new Set();
  talk.reported = {};
  dispatch({ type: "page.reconciled", sessionId: talk.session.id, items: account.items });
  const at = new Date().toISOString();
  const messages = account.items.map((item) => ({ role: item.role, text: item.text, at }));
  const { record, saver } = talk;
  const start = talk.sessionStart;
  talk.recording = talk.recording.then(async () => {
    // A cut list (complete: false) holds only the latest turns: replace just as many.
    const from = account.complete ? start : Math.max(start, record.messages.length - messages.length);
    await saver.replaceFrom(record.id, from, messages);
  });
  $("playback").textContent = "Resumed; the transcript was brought up to date";
  talk.threadMemory.reload(); // memory updates in the range the server gave up are missed too
}

function onAudio({ generation, pcm }) {
  if (talk.interrupted.has(generation) || !talk.player) return;
  if (!(generation in talk.audioMs)) keepLatest(talk.audioMs);
  talk.audioMs[generation] = (talk.audioMs[generation] || 0) + (pcm.length * 1000) / talk.player.sampleRate;
  talk.indicator.signal("audio");
  talk.player.push(generation, pcm);
}

/** Bound a generation → fact object before a new entry: drop the oldest generations. */
function keepLatest(byGeneration) {
  const generations = Object.keys(byGeneration).map(Number).sort((a, b) => a - b);
  for (const generation of generations.slice(0, Math.max(0, generations.length - TURNS_KEPT + 1))) {
    delete byGeneration[generation];
  }
}

/** Under an interrupted answer: how much of it was heard (timeline.js rule 4). */
function showHeard(key, response) {
  const cut = talk.interruptions[response.generation];
  const played = cut && cut.played_ms !== null && talk.player;
  markHeard(talk.nodes.get(key), {
    heardMs: played ? cut.played_ms : null,
    totalMs: played ? talk.audioMs[response.generation] || 0 : null,
    heardTextValue: response.heard_text || "",
    fullText: response.output_text || "",
  });
}

/** Barge-in: clear playback at once, then tell the server how much of the answer was heard.
 * Over WebRTC the server stopped the audio itself and knows what was played: nothing to do. */
async function interrupt(generation, reason) {
  talk.interrupted.add(generation);
  if (!talk.player) {
    talk.lastInterruption = { generation, reason, played_ms: null, clear_ms: 0 };
    talk.interruptions[generation] = talk.lastInterruption;
    $("playback").textContent = `Interrupted (${reason})`;
    dispatch({ type: "page.note", key: `${talk.keyPrefix}:g${generation}`, text: interruptionNote(generation) });
    return;
  }
  const at = performance.now();
  const played = await talk.player.clear();
  const playedMs = ((played[generation] || 0) * 1000) / talk.player.sampleRate;
  if (talk.conn) talk.conn.reportPlayback(generation, playedMs);
  talk.playbackReports.push({ generation, played_ms: playedMs, final: true });
  talk.lastInterruption = { generation, reason, played_ms: Math.round(playedMs), clear_ms: performance.now() - at };
  talk.interruptions[generation] = talk.lastInterruption;
  $("playback").textContent = `Interrupted (${reason}) — played ${Math.round(playedMs)} ms of the answer`;
  const key = `${talk.keyPrefix}:g${generation}`;
  dispatch({ type: "page.note", key, text: interruptionNote(generation) });
  const node = talk.nodes.get(key);
  if (node && node.querySelector(".heard")) { // response.done came first: now we know the time
    markHeard(node, { heardMs: talk.lastInterruption.played_ms, totalMs: talk.audioMs[generation] || 0 });
  }
}

function interruptionNote(generation) {
  const cut = talk.interruptions[generation];
  const played = cut && cut.played_ms !== null ? ` after ${cut.played_ms} ms of playback` : "";
  return played ? HEARD_NOTE.replace("interrupted", `interrupted${played}`) : HEARD_NOTE;
}

function onPlaybackProgress(progress) {
  if (!talk.conn) return;
  const now = performance.now();
  if (now - (talk.lastReportAt || 0) >= PLAYBACK_REPORT_MS) {
    talk.lastReportAt = now;
    for (const [gen, samples] of Object.entries(progress.played)) {
      const generation = Number(gen);
      if (talk.interrupted.has(generation) || talk.reported[gen] === samples) continue;
      talk.reported[gen] = samples;
      talk.conn.reportPlayback(generation, (samples * 1000) / talk.player.sampleRate);
    }
  }
  if (progress.state === "playing") {
    $("playback").textContent = `Playing · ${Math.round((progress.buffered * 1000) / talk.player.sampleRate)} ms buffered`;
  }
}

function onPlaybackDrained(generation, playedMs) {
  if (talk.interrupted.has(generation) || !talk.conn) return;
  talk.indicator.signal("drained");
  talk.conn.reportPlayback(generation, playedMs);
  talk.playbackReports.push({ generation, played_ms: playedMs, final: true });
  $("playback").textContent = `Played ${Math.round(playedMs)} ms`;
}

async function startMicrophone() {
  if (talk.mic) return;
  const mic = new Microphone((pcm) => {
    if (talk.conn) talk.conn.sendAudio(pcm);
  }, { onLevel: (level) => talk.meter.update(level) });
  try {
    await mic.start();
    talk.mic = mic;
    mic.setPaused(talk.micPaused);
  } catch (error) {
    notice(`Microphone unavailable (${errorText(error)}): you can type instead.`, "warn");
  }
}

async function stopSession() {
  const { conn, mic, player } = talk;
  talk.conn = null;
  talk.session = null;
  if (talk.approvals) talk.approvals.clear();
  if (conn) conn.close();
  if (mic) await mic.stop().catch(() => {});
  if (player) await player.stop().catch(() => {});
  $("remote-audio").srcObject = null;
  talk.mic = null;
  talk.player = null;
  talk.interrupted = new Set();
  talk.reported = {};
  dispatch({ type: "page.stopped" });
  talk.audioMs = {};
  talk.latency = {};
  talk.meter.reset();
  talk.ready = false;
  setConnection("idle");
}

const CLIENT_SECRET_SECONDS = 600; // a cross-origin page's session credential (above)

/**
 * What opens the session: the page's token, or — on pages hosted on another origin than the
 * runtime (SPEC WEB-4) — a short-lived client secret minted with it for the session's role.
 */
async function sessionCredential(roleId) {
  if (!apiBase()) return token();
  const session = { type: "realtime", ...(roleId ? { model: roleId } : {}) };
  const minted = await api("/v1/realtime/client_secrets", {
    method: "POST",
    body: { expires_after: { anchor: "created_at", seconds: CLIENT_SECRET_SECONDS }, session },
  });
  return minted.value;
}

/** Open a session: new thread, or a continuation of the record's thread. */
async function startSession({ continueThread }) {
  const record = talk.record;
  const options = continueThread
    ? {
      requestedThreadId: record.thread_id,
      previousVoiceSessionId: record.voice_session_id,
      role: record.role_id,
    }
    : { role: $("role").value };
  // The microphone first: a WebRTC offer carries its track.
  await startMicrophone();
  const conn = new RealtimeConnection({
    url: realtimeUrl(),
    token: await sessionCredential(options.role),
    microphone: () => (talk.mic ? talk.mic.track() : null),
  });
  talk.conn = conn;
  conn.addEventListener("state", (e) => {
    if (conn !== talk.conn) return;
    // Connected before the player runs: startSession shows it once the page is ready, so a
    // turn typed at once is heard and the indicator does not fall back to listening mid-turn.
    if (e.detail.state === "connected" && !talk.ready) return;
    setConnection(e.detail.state, e.detail);
    if (e.detail.state === "lost") onSessionLost(e.detail.reason);
    if (e.detail.reconcile) reconcile(e.detail.reconcile);
  });
  conn.addEventListener("event", (e) => conn === talk.conn && onEvent(e.detail));
  conn.addEventListener("audio", (e) => conn === talk.conn && onAudio(e.detail));
  conn.addEventListener("remote-audio", (e) => {
    if (conn !== talk.conn) return;
    const audio = $("remote-audio");
    audio.srcObject = e.detail;
    audio.play().catch(() => {}); // autoplay: the Start click is the user's gesture
  });
  let session;
  try {
    session = await conn.start(options);
  } catch (error) {
    talk.conn = null;
    if (talk.mic) await talk.mic.stop().catch(() => {});
    talk.mic = null;
    const why = error.code === "previous_session_not_in_thread" || error.code === "thread_not_found"
      ? "This conversation can no longer be continued (its runtime history is gone)."
      : "Could not start a session.";
    notice(`${why} ${error.message} (${error.code})`, "bad");
    setConnection("failed", { code: error.code });
    return false;
  }
  talk.session = session;
  dispatch({ type: "page.session", prefix: session.id });
  talk.sessionStart = record.messages.length; // this session's messages start here
  talk.sessionJournaled = false;
  talk.continuing = Boolean(continueThread);
  const ids = { thread_id: session.thread_id, role_id: session.role.id };
  if (talk.saver.records.has(record.id)) await talk.saver.update(record.id, ids);
  else await talk.saver.track(Object.assign(record, ids));
  if (conn.carriesAudio) {
    const player = new Player(session.output_sample_rate, {
      onProgress: onPlaybackProgress,
      onDrained: onPlaybackDrained,
    });
    try {
      await player.start();
      talk.player = player;
    } catch (error) {
      notice(`Audio playback unavailable: ${errorText(error)}`, "warn");
    }
  }
  // A microphone paused in an earlier session stays paused; the new session hears of it too.
  if (talk.micPaused) conn.sendJson({ type: "openrealtime.input.pause" });
  talk.ready = true;
  setConnection(conn.state);
  talk.threadMemory.open(session.thread_id);
  $("new-conversation").disabled = false;
  $("role").disabled = true; // a conversation keeps its role; "New conversation" picks again
  $("start").textContent = "End";
  return true;
}

function onSessionLost(reason) {
  // The server no longer holds the session (restart, expiry): continue its thread instead.
  const record = talk.record;
  if (record.thread_id && record.voice_session_id) {
    notice(`The session ended on the server (${reason}); continuing the conversation in a new session.`, "warn");
    dispatch({ type: "page.divider", text: "— continued in a new session —" });
    stopSession().then(() => startSession({ continueThread: true }));
  } else {
    notice(`The session ended on the server (${reason}). Start again to go on.`, "warn");
    stopSession();
    $("start").textContent = "Start";
  }
}

async function onStartClick() {
  if (talk.conn) {
    await stopSession();
    $("start").textContent = talk.record.thread_id && talk.record.voice_session_id ? "Continue" : "Start";
    return;
  }
  notice("");
  $("start").disabled = true;
  const continueThread = Boolean(talk.record.thread_id && talk.record.voice_session_id);
  if (continueThread && talk.conversation.entries.size) dispatch({ type: "page.divider", text: "— continued —" });
  await startSession({ continueThread });
  $("start").disabled = false;
}

async function onNewConversation() {
  await stopSession();
  talk.record = newRecord();
  dispatch({ type: "page.cleared" });
  talk.threadMemory.open(null);
  talk.recording = Promise.resolve();
  history.replaceState(null, "", location.pathname);
  $("role").disabled = false;
  $("conversation-title").textContent = "Conversation";
  $("save-state").textContent = "";
  $("save-problem").classList.add("hidden");
  $("start").textContent = "Start";
  $("new-conversation").disabled = true;
  notice("New conversation: pick a role and press Start.");
}

function onMicToggle() {
  talk.micPaused = !talk.micPaused;
  if (talk.mic) talk.mic.setPaused(talk.micPaused);
  if (talk.conn) talk.conn.sendJson({ type: talk.micPaused ? "openrealtime.input.pause" : "openrealtime.input.resume" });
  $("mic").textContent = talk.micPaused ? "Resume microphone" : "Pause microphone";
  $("mic").setAttribute("aria-pressed", String(talk.micPaused));
  $("mic-state").classList.toggle("hidden", !talk.micPaused);
  talk.meter.reset();
  talk.indicator.signal(talk.micPaused ? "pause" : "resume");
  $("level").parentElement.classList.toggle("hidden", talk.micPaused); // no level to show
}

function onType(event) {
  event.preventDefault();
  const text = $("type-text").value.trim();
  if (!text || !talk.conn) return;
  $("type-text").value = "";
  const key = `${talk.keyPrefix}:t:${crypto.randomUUID()}`;
  dispatch({ type: "page.typed", key, text }); // shown, recorded, the thread moved on
  talk.conn.sendText(text);
  talk.indicator.signal("typed");
}

// ------------------------------------------------------------------ loading

async function loadContinuation(recordId) {
  let saved;
  try {
    saved = await api(`/api/conversations/${encodeURIComponent(recordId)}`);
  } catch (error) {
    notice(`Could not open that conversation: ${errorText(error)}`, "bad");
    return;
  }
  $("conversation-title").textContent = `Continuing: ${saved.title || "untitled conversation"}`;
  if (!saved.continuable) {
    notice(`View only: ${saved.view_only_reason || "this conversation cannot be continued"}.`, "warn");
    $("start").disabled = true;
  }
  const local = await talk.saver.localSnapshot(recordId);
  const messages = local && local.messages.length >= saved.messages.length
    ? local.messages
    : saved.messages.map((m) => ({ role: m.role, text: m.text, at: m.at }));
  dispatch({ type: "page.earlier", messages });
  talk.record = local && local.version >= saved.version
    ? local
    : newRecord({
      id: saved.id,
      messages,
      version: saved.version,
      confirmed: saved.message_count,
      thread_id: saved.thread_id,
      voice_session_id: saved.voice_session_id,
      role_id: saved.role_id,
      title: saved.title || "",
    });
  if (saved.role_id) $("role").value = saved.role_id;
  $("role").disabled = true;
  if (saved.continuable) $("start").textContent = "Continue";
  if (saved.thread_id) talk.threadMemory.open(saved.thread_id);
  await talk.saver.track(talk.record);
}

async function main() {
  let who;
  try {
    who = await signedIn("index.html");
  } catch (error) {
    notice(`Server unreachable: ${errorText(error)}`, "bad");
    return;
  }
  if (!who) return;
  talk.account = `${who.tenant}/${who.user}`;
  talk.saver = new RecordSaver(talk.account);
  talk.threadMemory = new ThreadMemoryPanel($("thread-memory"));
  talk.meter = new LevelMeter($("level-meter"));
  talk.indicator = new TurnIndicator($("turn-state"));
  const approvals = el("div", { id: "approvals", class: "approvals hidden", "aria-live": "polite" });
  $("transcript").before(approvals);
  talk.approvals = new ApprovalPanel(approvals, (message) => Boolean(talk.conn && talk.conn.sendJson(message)));
  talk.saver.addEventListener("status", (e) => showSaveStatus(e.detail));
  talk.saver.addEventListener("storage-error", (e) =>
    notice(`This browser cannot keep unsaved messages (${e.detail}); saving to the server still works.`, "warn"),
  );
  const roles = await listRoles();
  for (const role of roles) {
    const option = el("option", { value: role.id }, role.name);
    if (role.is_default) option.selected = true;
    $("role").append(option);
  }
  const continueId = new URLSearchParams(location.search).get("continue");
  if (continueId) await loadContinuation(continueId);
  else talk.record = newRecord();
  $("start").addEventListener("click", onStartClick);
  $("new-conversation").addEventListener("click", onNewConversation);
  $("mic").addEventListener("click", onMicToggle);
  $("type-form").addEventListener("submit", onType);
  $("export-record").addEventListener("click", () => {
    const snapshot = talk.saver.records.get(talk.record.id)?.snapshot || talk.record;
    downloadJson(`conversation-${snapshot.id}.json`, snapshot);
  });
  $("discard-record").addEventListener("click", async () => {
    await talk.saver.discard(talk.record.id);
    $("save-problem").classList.add("hidden");
    $("save-state").textContent = "local copy discarded";
  });
  // Leaving ends the session: its resume token lives only in this page, so nothing could
  // resume it, and a session left waiting would keep its thread busy (RES-2 continues it).
  window.addEventListener("pagehide", () => {
    if (talk.conn) talk.conn.close();
  });
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) location.reload(); // back from the page cache: the session was closed
  });
  // Snapshots an earlier visit could not send: retry them now (CONV-3).
  talk.resumed = await talk.saver.resumePending();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
