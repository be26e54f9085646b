// The talk page's input level meter and its listening / speaking indicator (issue 21).
//
// Theory of operation
// -------------------
// Meter. The capture worklet posts the microphone's RMS and peak about 20 times a second
// (capture-worklet.js); `LevelMeter.update` draws them: the bar is the RMS on a dBFS scale from
// FLOOR_DB (empty) to 0 dB (full), the tick the peak, held for PEAK_HOLD_MS then falling at
// PEAK_FALL_DB_PER_S. The element carries the last values (`data-rms-db`, `data-peak-db`) and
// `aria-valuenow`. Nothing of it goes on the network.
//
// Indicator. A transition table over the server's events (and the page's own microphone
// pause): who has the turn. States:
//   idle       no session
//   listening  the session waits for the person
//   hearing    the server's VAD hears speech (input_audio_buffer.speech_started)
//   thinking   the turn ended (speech stopped, committed, or a typed turn): an answer comes
//   speaking   the answer's audio is arriving or playing
//   paused     the person paused the microphone (typing still works)
// A response that ends goes back to listening once its audio has played (over the
// WebSocket: the player drained; over WebRTC: output_audio_buffer.stopped or .cleared).

const FLOOR_DB = -60;
const PEAK_HOLD_MS = 600;
const PEAK_FALL_DB_PER_S = 20;

const toDb = (value) => (value > 0 ? Math.max(FLOOR_DB, 20 * Math.log10(value)) : FLOOR_DB);
const percent = (db) => ((db - FLOOR_DB) / -FLOOR_DB) * 100;

export class LevelMeter {
  /** `node`: the .meter element; its `.bar` and `.peak` children are drawn. */
  constructor(node) {
    this.node = node;
    this.bar = node.querySelector(".bar");
    this.tick = node.querySelector(".peak");
    this.peakDb = FLOOR_DB;
    this.peakAt = 0;
    this.reset();
  }

  update({ rms, peak }, now = performance.now()) {
    const rmsDb = toDb(rms);
    const peakDb = toDb(peak);
    const held = this.peakDb - (Math.max(0, now - this.peakAt - PEAK_HOLD_MS) / 1000) * PEAK_FALL_DB_PER_S;
    if (peakDb >= held) {
      this.peakDb = peakDb;
      this.peakAt = now;
    }
    const shownPeak = Math.max(peakDb, held, FLOOR_DB);
    this.bar.style.width = `${percent(rmsDb)}%`;
    this.tick.style.left = `${percent(shownPeak)}%`;
    this.node.dataset.rmsDb = rmsDb.toFixed(1);
    this.node.dataset.peakDb = peakDb.toFixed(1);
    this.node.setAttribute("aria-valuenow", rmsDb.toFixed(0));
  }

  reset() {
    this.peakDb = FLOOR_DB;
    this.bar.style.width = "0";
    this.tick.style.left = "0";
    this.node.dataset.rmsDb = String(FLOOR_DB);
    this.node.dataset.peakDb = String(FLOOR_DB);
    this.node.setAttribute("aria-valuenow", String(FLOOR_DB));
  }
}

export const INDICATOR_LABELS = {
  idle: "not listening",
  listening: "listening",
  hearing: "hearing you",
  thinking: "thinking…",
  speaking: "speaking",
  paused: "microphone paused",
};

// (state, signal) → next state; "*" is any state. Signals are server event types, plus the
// page's own: "audio" (an answer's audio arrived), "drained" (the player played it out),
// "typed", "connected", "closed", "pause", "resume".
const TRANSITIONS = {
  "*": {
    connected: "listening",
    closed: "idle",
    pause: "paused",
    typed: "thinking",
    "input_audio_buffer.speech_started": "hearing",
    "response.created": "thinking",
  },
  listening: { audio: "speaking", "output_audio_buffer.started": "speaking" },
  hearing: {
    "input_audio_buffer.speech_stopped": "thinking",
    "input_audio_buffer.committed": "thinking",
    "openrealtime.input.paused": "paused",
    audio: "speaking",
  },
  thinking: {
    audio: "speaking",
    "output_audio_buffer.started": "speaking",
    "response.done": "listening",
  },
  speaking: {
    drained: "listening",
    "output_audio_buffer.stopped": "listening",
    "output_audio_buffer.cleared": "listening",
    "openrealtime.response.interrupted": "listening",
  },
  paused: { resume: "listening", audio: "speaking" },
};

/** The indicator's next state (module docstring); a signal the table does not name for the
 * state changes nothing. Without a session only "connected" counts. */
export function nextIndicatorState(state, signal) {
  if (state === "idle") return signal === "connected" ? "listening" : state;
  const own = (TRANSITIONS[state] || {})[signal];
  if (own) return own;
  if (state === "paused" && signal === "input_audio_buffer.speech_started") return state;
  return TRANSITIONS["*"][signal] || state;
}

export class TurnIndicator {
  constructor(node) {
    this.node = node;
    this.state = "idle";
    this.micPaused = false;
    this.history = []; // the last states (diagnostics and tests), bounded
    this.draw();
  }

  signal(signal) {
    if (signal === "pause" || signal === "resume") this.micPaused = signal === "pause";
    let next = nextIndicatorState(this.state, signal);
    if (next === "listening" && this.micPaused) next = "paused"; // nobody listens to a paused mic
    if (next === this.state) return;
    this.state = next;
    this.history.push(next);
    if (this.history.length > 50) this.history.shift();
    this.draw();
  }

  draw() {
    this.node.dataset.state = this.state;
    this.node.textContent = INDICATOR_LABELS[this.state];
  }
}
