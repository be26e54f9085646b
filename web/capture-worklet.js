// Microphone capture: downsample the context's rate to 16 kHz mono PCM16 and post 20 ms frames.
//
// Decimation is a box filter: every output sample is the mean of the input samples that fall
// into its 1/16000 s slot (a cheap low-pass that keeps aliasing out of the speech band at the
// usual 44.1/48 kHz capture rates). Frames are posted as transferable ArrayBuffers.
//
// Level: every LEVEL_MS the worklet posts the RMS and peak of the input samples it saw in that
// time (at the context's rate, before decimation), in [0, 1] — about 20 messages a second
// for the page's meter (level_meter.js). They stay in the page: nothing goes on the network.

const OUT_RATE = 16000;
const FRAME = OUT_RATE / 50; // 20 ms
const LEVEL_MS = 50;

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.phase = 0;
    this.sum = 0;
    this.count = 0;
    this.frame = new Int16Array(FRAME);
    this.filled = 0;
    this.levelSum = 0;
    this.levelPeak = 0;
    this.levelCount = 0;
    this.levelEvery = Math.round((sampleRate * LEVEL_MS) / 1000);
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const channel = input[0];
    for (let i = 0; i < channel.length; i++) {
      const sample = channel[i];
      this.levelSum += sample * sample;
      this.levelPeak = Math.max(this.levelPeak, Math.abs(sample));
      if (++this.levelCount === this.levelEvery) {
        const rms = Math.sqrt(this.levelSum / this.levelCount);
        this.port.postMessage({ level: { rms, peak: Math.min(1, this.levelPeak) } });
        this.levelSum = 0;
        this.levelPeak = 0;
        this.levelCount = 0;
      }
      this.sum += sample;
      this.count += 1;
      this.phase += OUT_RATE;
      if (this.phase >= sampleRate) {
        this.phase -= sampleRate;
        const value = Math.max(-1, Math.min(1, this.sum / this.count));
        this.sum = 0;
        this.count = 0;
        this.frame[this.filled++] = value < 0 ? value * 0x8000 : value * 0x7fff;
        if (this.filled === FRAME) {
          this.port.postMessage({ pcm: this.frame.buffer }, [this.frame.buffer]);
          this.frame = new Int16Array(FRAME);
          this.filled = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("capture-processor", CaptureProcessor);
