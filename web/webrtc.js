// The WebRTC transport of realtime.js (SPEC RTC-2): one voice-session connection as an
// RTCPeerConnection to `POST /v1/realtime/calls`, with the protocol's JSON events on the
// `oai-events` data channel and the audio as tracks. realtime.js's WebSocketTransport is its
// twin; RealtimeConnection drives either through the same five calls (open, send, close, drop,
// and the onmessage / onclose hooks), so no page code knows which one it has.
//
// Theory of operation
// -------------------
// 1. `open(first)` makes a new peer connection: the data channel first (so the offer carries
//    it), then one audio transceiver sending the microphone's track (or nothing yet, if there
//    is no microphone) and receiving the agent's voice. It waits (bounded, GATHER_MAX_MS) for
//    the host candidates, POSTs the offer as multipart `sdp` + `openrealtime` (the first
//    message — `openrealtime.session.start` or `.resume` — without its token: the credential is
//    the bearer header, the resume token travels in the body, never in the URL), applies the
//    answer and resolves once the data channel is open (OPEN_TIMEOUT_MS).
// 2. A failure rejects with an Error carrying `code`, the HTTP `status` when the server
//    answered, and `fallback`: true when a WebSocket may still succeed (no RTCPeerConnection,
//    a network error, no WebRTC served (404, 405), 5xx, no ICE or data channel in time), false
//    when the server refused the credential or the session (401, 403, 409, 429, a 404 naming
//    the role or thread, other 4xx): the WebSocket would hear the same refusal.
// 3. Once open, text on the channel goes to `onmessage`. The channel closing or the peer
//    connection failing is one `onclose({code: 1006})`: WebRTC has no close codes, so the
//    connection tries a resume, and the server's answer to it says whether the session lives.
// 4. The agent's voice is the remote track (`onaudiotrack(stream)`). The server plays it out
//    and knows what was heard: the page sends no playback reports and truncates nothing.
// 5. `close()` hangs up (`POST …/hangup`, keepalive) and closes; `drop()` closes the peer
//    connection without hanging up, as a network failure would (a test hook). ICE restart is
//    not used: a resume is a new offer on a new peer connection.

import { apiUrl } from "./api.js";

export const CALLS_PATH = "/v1/realtime/calls";
export const EVENTS_CHANNEL = "oai-events";
const GATHER_MAX_MS = 1500; // host candidates only (no STUN): gathering takes milliseconds
const POST_TIMEOUT_MS = 10_000;
const OPEN_TIMEOUT_MS = 5_000; // ICE + DTLS + SCTP after the answer, on a working network
const DROP_CODE = 1006;

/** True when this browser can make a peer connection at all. */
export function webrtcAvailable() {
  return typeof globalThis.RTCPeerConnection === "function";
}

function transportError(code, message, { status = 0, fallback = false } = {}) {
  return Object.assign(new Error(message), { code, status, fallback });
}

// 404s that refuse the session itself: the WebSocket would hear them again.
const SESSION_NOT_FOUND = new Set(["role_not_found", "thread_not_found", "previous_session_not_in_thread"]);

/** Whether a refusal leaves the WebSocket worth trying: the server does not serve WebRTC (404
 * `webrtc_disabled`, or no such route: 404, 405 from a proxy or an older server) or could not
 * set the call up (5xx). */
function fallsBack(status, code) {
  if (status === 404) return !SESSION_NOT_FOUND.has(code);
  return status === 405 || status >= 500;
}

export class WebRTCTransport {
  kind = "webrtc";
  carriesAudio = false; // audio is on tracks, not in messages

  /** `track`: the microphone's MediaStreamTrack (or null). */
  constructor({ token, track = null, path = CALLS_PATH }) {
    this.token = token;
    this.track = track;
    this.path = path;
    this.callUrl = ""; // the Location of the call, for hangup
    this.onmessage = () => {};
    this.onclose = () => {};
    this.onaudiotrack = () => {};
    this._pc = null;
    this._channel = null;
    this._closed = false;
  }

  isOpen() {
    return Boolean(this._channel && this._channel.readyState === "open");
  }

  send(text) {
    if (!this.isOpen()) return false;
    this._channel.send(text);
    return true;
  }

  sendBinary() {
    return false; // the microphone is a track
  }

  async open(first) {
    if (!webrtcAvailable()) {
      throw transportError("webrtc_unavailable", "this browser has no RTCPeerConnection", { fallback: true });
    }
    const pc = new RTCPeerConnection({ iceServers: [] });
    this._pc = pc;
    const channel = pc.createDataChannel(EVENTS_CHANNEL);
    this._channel = channel;
    channel.onmessage = (event) => {
      if (typeof event.data === "string") this.onmessage(event.data);
    };
    pc.addTransceiver(this.track || "audio", { direction: "sendrecv" });
    pc.ontrack = (event) => this.onaudiotrack(event.streams[0] || new MediaStream([event.track]));
    try {
      await pc.setLocalDescription(await pc.createOffer());
      await gathered(pc, GATHER_MAX_MS);
      const answer = await this._post(pc.localDescription.sdp, first);
      await pc.setRemoteDescription({ type: "answer", sdp: answer });
      await opened(pc, channel, OPEN_TIMEOUT_MS);
    } catch (error) {
      this._shutdown({ hangup: Boolean(this.callUrl) }); // a call the server set up is ended
      if (error.code) throw error;
      throw transportError("webrtc_failed", `WebRTC failed: ${error.message}`, { fallback: true });
    }
    channel.onclose = () => this._lost();
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed" || pc.connectionState === "closed") this._lost();
    };
  }

  /** End the call for good: hang up on the server, close here. */
  close() {
    this._shutdown({ hangup: true });
  }

  /** Close the peer connection as a network failure would: the session waits for a resume. */
  drop() {
    if (this._closed) return;
    this._shutdown({ hangup: false });
    setTimeout(() => this.onclose({ code: DROP_CODE }), 0);
  }

  // ------------------------------------------------------------------ internals

  async _post(sdp, first) {
    const { token: _, ...message } = first;
    const body = new FormData();
    body.append("sdp", sdp);
    body.append("openrealtime", JSON.stringify(message));
    let response;
    try {
      response = await fetch(apiUrl(this.path), {
        method: "POST",
        headers: { Authorization: `Bearer ${this.token}` },
        body,
        cache: "no-store",
        signal: AbortSignal.timeout(POST_TIMEOUT_MS),
      });
    } catch (error) {
      const code = error.name === "TimeoutError" ? "timeout" : "network_error";
      throw transportError(code, `${CALLS_PATH}: ${error.message}`, { fallback: true });
    }
    const text = await response.text();
    if (response.status !== 201) {
      let data = {};
      try {
        data = JSON.parse(text);
      } catch {
        data = {};
      }
      throw transportError(data.code || `http_${response.status}`, data.message || response.statusText, {
        status: response.status,
        fallback: fallsBack(response.status, data.code),
      });
    }
    // The call's address, relative to the runtime (its Location is exposed to other origins).
    const where = response.headers.get("Location");
    this.callUrl = where ? new URL(where, response.url).href : "";
    return text;
  }

  _lost() {
    if (this._closed) return;
    this._shutdown({ hangup: false });
    this.onclose({ code: DROP_CODE });
  }

  _shutdown({ hangup }) {
    if (this._closed) return;
    this._closed = true;
    if (hangup && this.callUrl) {
      fetch(`${this.callUrl}/hangup`, {
        method: "POST",
        headers: { Authorization: `Bearer ${this.token}` },
        keepalive: true,
      }).catch(() => {});
    }
    if (this._channel) {
      this._channel.onclose = null;
      this._channel.onmessage = null;
    }
    if (this._pc) {
      this._pc.onconnectionstatechange = null;
      this._pc.ontrack = null;
      this._pc.close();
    }
  }
}

/** Resolves when ICE gathering completes, or after `maxMs` (whatever was gathered is sent). */
function gathered(pc, maxMs) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, maxMs);
    function done() {
      clearTimeout(timer);
      pc.removeEventListener("icegatheringstatechange", check);
      resolve();
    }
    function check() {
      if (pc.iceGatheringState === "complete") done();
    }
    pc.addEventListener("icegatheringstatechange", check);
  });
}

/** Resolves when the data channel is open; rejects if it closes, ICE fails or `ms` pass. */
function opened(pc, channel, ms) {
  if (channel.readyState === "open") return Promise.resolve();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(`no data channel within ${ms} ms`), ms);
    function fail(why) {
      clearTimeout(timer);
      reject(transportError("webrtc_not_connected", why, { fallback: true }));
    }
    channel.onopen = () => {
      clearTimeout(timer);
      resolve();
    };
    channel.onclose = () => fail("the data channel closed before it opened");
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed") fail("ICE or DTLS failed");
    };
  });
}
