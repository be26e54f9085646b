// A conversation's recordings on the history page (SPEC REC-3): each plays with what was said
// beside it — the word being heard highlighted, a waveform to click on (the person above the
// line, the agent below), answers the person interrupted marked where they cut in. Owners
// download theirs; admins put or lift a legal hold.
//
// Theory of operation
// -------------------
// The audio (GET /api/recordings/{id}/audio, a stereo FLAC) is fetched with the page's bearer
// token and played from a blob URL; it is decoded once, offline, for the waveform's peaks.
// The timeline (GET /api/recordings/{id}/timeline) gives every segment and word its times on
// the recording's clock; the server estimates word times within a segment, so the highlight is
// the word most likely being heard. While playing, each animation frame marks the words whose
// span holds the playhead (a person talking over the agent: one word on each side).

import { api, apiBlob, el, errorText, formatTime, isAdmin } from "./api.js";

const PERSON = "#2457d6";
const AGENT = "#1f8a4c";
const CUT = "#c0392b";

function clock(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

function summary(r) {
  const kept = r.retain_until ? `kept until ${formatTime(r.retain_until)}` : "kept until deleted";
  return `Recorded ${formatTime(r.started_at)} · ${clock(r.duration_ms)} · ${kept}`;
}

/** The thread's recordings in `container`; how many there are. */
export async function showRecordings(container, threadId, who) {
  container.replaceChildren();
  if (!threadId) return 0;
  const { recordings } = await api(`/api/recordings?thread_id=${encodeURIComponent(threadId)}`);
  for (const r of recordings) container.append(player(r, who));
  return recordings.length;
}

function player(r, who) {
  const audio = el("audio", { preload: "auto" });
  const play = el("button", { type: "button", class: "primary rec-play", disabled: "" }, "Play");
  const time = el("span", { class: "muted small rec-time" }, `0:00 / ${clock(r.duration_ms)}`);
  const download = el("button", { type: "button", class: "rec-download", disabled: "" }, "Download");
  const hold = el("span", { class: `badge warn rec-hold${r.protected ? "" : " hidden"}` }, "Legal hold");
  const canvas = el("canvas", { class: "waveform", width: "1000", height: "90", title: "Click to play from there" });
  const words = el("div", { class: "transcript rec-transcript" });
  const status = el("p", { class: "muted small rec-status" }, "Loading the recording…");
  const controls = el("div", { class: "row" }, play, time, download, hold);
  if (isAdmin(who)) controls.append(holdToggle(r, hold));
  const box = el(
    "div",
    { class: "recording", "data-recording": r.id },
    el("div", { class: "muted small" }, summary(r)),
    controls,
    canvas,
    status,
    words,
    audio,
  );
  load(r, { audio, play, time, download, canvas, words, status, box }).catch((error) => {
    status.textContent = `Could not load the recording: ${errorText(error)}`;
  });
  return box;
}

function holdToggle(r, badge) {
  const button = el("button", { type: "button", class: "rec-hold-toggle" }, r.protected ? "Lift legal hold" : "Put on legal hold");
  let held = r.protected;
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const updated = await api(`/api/recordings/${encodeURIComponent(r.id)}/protection`, {
        method: "PUT",
        body: { protected: !held },
      });
      held = updated.protected;
      badge.classList.toggle("hidden", !held);
      button.textContent = held ? "Lift legal hold" : "Put on legal hold";
    } catch (error) {
      button.title = errorText(error);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

async function load(r, ui) {
  const id = encodeURIComponent(r.id);
  const [blob, timeline] = await Promise.all([apiBlob(`/api/recordings/${id}/audio`), api(`/api/recordings/${id}/timeline`)]);
  const url = URL.createObjectURL(blob);
  ui.audio.src = url;
  ui.download.disabled = false;
  ui.download.addEventListener("click", () => {
    const a = el("a", { href: url, download: `${r.id}.flac` });
    document.body.append(a);
    a.click();
    a.remove();
  });
  const spans = renderWords(timeline, ui);
  const peaks = await decodePeaks(blob, ui.canvas.width);
  const duration = timeline.duration_ms || r.duration_ms;
  const cuts = timeline.segments.filter((s) => s.interrupted).map((s) => s.end_ms);
  const draw = (ms) => drawWave(ui.canvas, peaks, cuts, duration, ms);
  draw(0);
  ui.status.textContent = timeline.segments.length
    ? "Word times are estimated within each utterance. Struck-through words were cut off before they were heard."
    : "No words were recorded.";
  ui.play.disabled = false;

  let current = [];
  const show = () => {
    const ms = ui.audio.currentTime * 1000;
    ui.time.textContent = `${clock(ms)} / ${clock(duration)}`;
    draw(ms);
    const now = spans.filter((s) => s.start <= ms && ms < s.end).map((s) => s.node);
    if (now.length !== current.length || now.some((n, i) => n !== current[i])) {
      for (const n of current) n.classList.remove("current");
      for (const n of now) n.classList.add("current");
      current = now;
      ui.box.dataset.word = now.map((n) => n.dataset.index).join(",");
    }
  };
  const tick = () => {
    show();
    if (!ui.audio.paused) requestAnimationFrame(tick);
  };
  ui.audio.addEventListener("play", () => {
    ui.play.textContent = "Pause";
    ui.box.dataset.playing = "true";
    requestAnimationFrame(tick);
  });
  ui.audio.addEventListener("pause", () => {
    ui.play.textContent = "Play";
    ui.box.dataset.playing = "false";
    show();
  });
  ui.audio.addEventListener("seeked", show);
  ui.audio.addEventListener("timeupdate", show);
  ui.play.addEventListener("click", () => (ui.audio.paused ? ui.audio.play() : ui.audio.pause()));
  const seek = (ms) => {
    ui.audio.currentTime = Math.max(0, ms) / 1000;
    show();
  };
  ui.canvas.addEventListener("click", (event) => {
    const box = ui.canvas.getBoundingClientRect();
    seek(((event.clientX - box.left) / box.width) * duration);
  });
  ui.words.addEventListener("click", (event) => {
    const word = event.target.closest(".word");
    if (word) seek(Number(word.dataset.start));
  });
  ui.box.dataset.ready = "true";
}

function renderWords(timeline, ui) {
  const spans = [];
  ui.words.replaceChildren();
  for (const segment of timeline.segments) {
    const who = segment.side === "person" ? "You" : "Agent";
    const line = el("p", { class: `msg ${segment.side === "person" ? "user" : "assistant"} segment`, "data-side": segment.side }, el("strong", {}, `${clock(segment.start_ms)} ${who}: `));
    for (const w of segment.words) {
      const index = String(spans.length);
      const node = el("span", { class: `word${w.heard === false ? " unheard" : ""}`, "data-start": String(w.start_ms), "data-index": index, title: clock(w.start_ms) }, w.text);
      line.append(node, " ");
      spans.push({ start: w.start_ms, end: w.end_ms, node });
    }
    if (segment.interrupted) line.append(el("span", { class: "badge warn", title: `cut off at ${clock(segment.end_ms)}` }, "interrupted"));
    ui.words.append(line);
  }
  if (timeline.truncated) ui.words.append(el("p", { class: "muted small" }, "The rest of the transcript was too long to keep."));
  return spans;
}

async function decodePeaks(blob, columns) {
  const data = await blob.arrayBuffer();
  const decoded = await new OfflineAudioContext(2, 1, 16000).decodeAudioData(data);
  const channels = [0, 1].map((c) => decoded.getChannelData(Math.min(c, decoded.numberOfChannels - 1)));
  const per = Math.max(1, Math.floor(decoded.length / columns));
  return channels.map((samples) => {
    const peaks = new Float32Array(columns);
    for (let x = 0; x < columns; x++) {
      let top = 0;
      for (let i = x * per, end = Math.min(samples.length, i + per); i < end; i++) top = Math.max(top, Math.abs(samples[i]));
      peaks[x] = top;
    }
    return peaks;
  });
}

function drawWave(canvas, [person, agent], cuts, duration, ms) {
  const g = canvas.getContext("2d");
  const { width, height } = canvas;
  const mid = height / 2;
  g.clearRect(0, 0, width, height);
  const played = duration ? (ms / duration) * width : 0;
  for (let x = 0; x < width; x++) {
    const dim = x > played ? 0.45 : 1;
    g.globalAlpha = dim;
    g.fillStyle = PERSON;
    g.fillRect(x, mid - person[x] * (mid - 2), 1, person[x] * (mid - 2));
    g.fillStyle = AGENT;
    g.fillRect(x, mid, 1, agent[x] * (mid - 2));
  }
  g.globalAlpha = 1;
  g.fillStyle = CUT;
  for (const at of cuts) g.fillRect(Math.round((at / duration) * width), 0, 2, height);
  g.fillStyle = "#1d2330";
  g.fillRect(Math.round(played), 0, 1, height);
}
