// Assistant audio playback with a jitter buffer, at the session's output rate (the AudioContext
// runs at that rate, so samples play as they come).
//
// Theory of operation
// -------------------
// Chunks arrive tagged with their response generation and queue in order. The player waits in
// "buffering" until PREBUFFER of audio is queued (or the response's audio is complete), then
// "playing"; an underrun outputs silence and goes back to "buffering", so network jitter costs a
// short pause instead of crackle. Played samples are counted per generation: that count is what
// the page reports to the server (openrealtime.playback → the heard prefix). "clear" drops all
// queued audio at once (barge-in) and answers with the played counts. A generation is "drained"
// when its last queued chunk has played and its "end" has come, in either order: the server
// sends `response.output_audio.done` only once it thinks playout is over, so "end" often comes
// after the queue already ran dry.
//
// Messages in:  {type: "push", generation, pcm: ArrayBuffer (Int16)}, {type: "end", generation},
//               {type: "clear"}, {type: "pause"}, {type: "resume"} (a held answer)
// Messages out: {type: "progress", played: {gen: samples}, buffered, state}
//               {type: "cleared", played}, {type: "drained", generation, played}

const PREBUFFER_MS = 80;
const PROGRESS_EVERY = 8; // render quanta (~10 ms at 24 kHz with 128-sample quanta … ~43 ms)

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // {generation, samples: Float32Array, offset}
    this.buffered = 0;
    this.ended = new Set();
    this.played = {};
    this.state = "buffering";
    this.paused = false;
    this.ticks = 0;
    this.prebuffer = Math.round((sampleRate * PREBUFFER_MS) / 1000);
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  onMessage(message) {
    if (message.type === "push") {
      const pcm = new Int16Array(message.pcm);
      const samples = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 0x8000;
      this.queue.push({ generation: message.generation, samples, offset: 0 });
      this.buffered += samples.length;
      if (!(message.generation in this.played)) this.played[message.generation] = 0;
    } else if (message.type === "end") {
      this.ended.add(message.generation);
      const queued = this.queue.some((chunk) => chunk.generation === message.generation);
      if (message.generation in this.played && !queued) this.drained(message.generation);
    } else if (message.type === "pause" || message.type === "resume") {
      this.paused = message.type === "pause"; // a held answer: keep the queue, play silence
    } else if (message.type === "clear") {
      this.queue = [];
      this.buffered = 0;
      this.state = "buffering";
      this.paused = false;
      this.port.postMessage({ type: "cleared", played: { ...this.played } });
    }
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    if (!this.paused && this.state === "buffering" && this.queue.length > 0) {
      const head = this.queue[0].generation;
      if (this.buffered >= this.prebuffer || this.ended.has(head)) this.state = "playing";
    }
    if (!this.paused && this.state === "playing") {
      let i = 0;
      while (i < out.length && this.queue.length > 0) {
        const chunk = this.queue[0];
        const take = Math.min(out.length - i, chunk.samples.length - chunk.offset);
        out.set(chunk.samples.subarray(chunk.offset, chunk.offset + take), i);
        chunk.offset += take;
        i += take;
        this.buffered -= take;
        this.played[chunk.generation] = (this.played[chunk.generation] || 0) + take;
        if (chunk.offset >= chunk.samples.length) {
          this.queue.shift();
          const next = this.queue[0];
          if ((!next || next.generation !== chunk.generation) && this.ended.has(chunk.generation)) {
            this.drained(chunk.generation);
          }
        }
      }
      if (this.queue.length === 0) this.state = "buffering";
    }
    for (let c = 1; c < outputs[0].length; c++) outputs[0][c].set(out);
    if (++this.ticks % PROGRESS_EVERY === 0) {
      this.port.postMessage({
        type: "progress",
        played: { ...this.played },
        buffered: this.buffered,
        state: this.state,
      });
    }
    return true;
  }

  drained(generation) {
    this.port.postMessage({ type: "drained", generation, played: this.played[generation] });
  }
}

registerProcessor("playback-processor", PlaybackProcessor);
