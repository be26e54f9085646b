// Microphone capture (16 kHz PCM16 frames) and assistant playback (jitter buffer) for the talk
// page. Both run in AudioWorklets (capture-worklet.js, playback-worklet.js) off the main thread.
// Over WebRTC the microphone's track itself is sent (the frames only drive the level meter) and
// the answer plays from the remote track, so the Player is not used.

export class Microphone {
  /** `onFrame(ArrayBuffer)` gets 20 ms of 16 kHz PCM16 little-endian; `onLevel({rms, peak})`
   * the input's level about 20 times a second (nothing while paused). */
  constructor(onFrame, { onLevel = () => {} } = {}) {
    this.onFrame = onFrame;
    this.onLevel = onLevel;
    this.context = null;
    this.stream = null;
    this.paused = false;
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
    });
    this.context = new AudioContext({ latencyHint: "interactive" });
    await this.context.audioWorklet.addModule(new URL("./capture-worklet.js", import.meta.url));
    const source = this.context.createMediaStreamSource(this.stream);
    const node = new AudioWorkletNode(this.context, "capture-processor", {
      numberOfInputs: 1,
      numberOfOutputs: 1,
      channelCount: 1,
      channelCountMode: "explicit",
    });
    node.port.onmessage = (event) => {
      if (this.paused) return;
      if (event.data.level) this.onLevel(event.data.level);
      else this.onFrame(event.data.pcm);
    };
    // A silent sink keeps the graph pulling the worklet without echoing the microphone.
    const mute = this.context.createGain();
    mute.gain.value = 0;
    source.connect(node).connect(mute).connect(this.context.destination);
    if (this.context.state === "suspended") await this.context.resume();
  }

  /** The microphone's track (a WebRTC offer sends it), or null before start(). */
  track() {
    return this.stream ? this.stream.getAudioTracks()[0] || null : null;
  }

  setPaused(paused) {
    this.paused = paused;
    for (const track of this.stream ? this.stream.getAudioTracks() : []) track.enabled = !paused;
  }

  async stop() {
    for (const track of this.stream ? this.stream.getTracks() : []) track.stop();
    if (this.context) await this.context.close();
    this.context = null;
    this.stream = null;
  }
}

export class Player {
  /** Plays PCM16 at `sampleRate` (the session's output rate). */
  constructor(sampleRate, { onProgress = () => {}, onDrained = () => {} } = {}) {
    this.sampleRate = sampleRate;
    this.onProgress = onProgress;
    this.onDrained = onDrained;
    this.played = {};
    this.buffered = 0;
    this.state = "buffering";
    this.context = null;
    this.node = null;
    this._cleared = [];
  }

  async start() {
    this.context = new AudioContext({ sampleRate: this.sampleRate, latencyHint: "interactive" });
    await this.context.audioWorklet.addModule(new URL("./playback-worklet.js", import.meta.url));
    this.node = new AudioWorkletNode(this.context, "playback-processor", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
    });
    this.node.port.onmessage = (event) => this._onMessage(event.data);
    this.node.connect(this.context.destination);
    if (this.context.state === "suspended") await this.context.resume();
  }

  push(generation, pcm) {
    if (!this.node) return;
    this.buffered += pcm.length;
    this.node.port.postMessage({ type: "push", generation, pcm: pcm.buffer }, [pcm.buffer]);
  }

  /** The response's audio is complete: play out what is queued without waiting for more. */
  end(generation) {
    if (this.node) this.node.port.postMessage({ type: "end", generation });
  }

  /** Hold playback where it is (a possible false interruption), or play on. */
  pause() {
    if (this.node) this.node.port.postMessage({ type: "pause" });
  }

  resume() {
    if (this.node) this.node.port.postMessage({ type: "resume" });
  }

  /** Drop everything queued now; resolves with the played samples per generation. */
  clear() {
    if (!this.node) return Promise.resolve({ ...this.played });
    this.buffered = 0;
    return new Promise((resolve) => {
      this._cleared.push(resolve);
      this.node.port.postMessage({ type: "clear" });
    });
  }

  playedMs(generation) {
    return ((this.played[generation] || 0) * 1000) / this.sampleRate;
  }

  bufferedMs() {
    return (this.buffered * 1000) / this.sampleRate;
  }

  async stop() {
    if (this.context) await this.context.close();
    this.context = null;
    this.node = null;
  }

  _onMessage(message) {
    if (message.played) this.played = message.played;
    if (message.type === "progress") {
      this.buffered = message.buffered;
      this.state = message.state;
      this.onProgress(message);
    } else if (message.type === "cleared") {
      this.buffered = 0;
      this.state = "buffering";
      for (const resolve of this._cleared.splice(0)) resolve({ ...message.played });
    } else if (message.type === "drained") {
      this.onDrained(message.generation, (message.played * 1000) / this.sampleRate);
    }
  }
}
