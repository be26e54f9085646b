// Microphone capture: downsample the context's rate to 16 kHz mono PCM16 and post 20 ms frames.
//
// Decimation is a box filter: every output sample is the mean of the input samples that fall
// into its 1/16000 s slot (a cheap low-pass that keeps aliasing out of the speech band at the
// usual 44.1/48 kHz capture rates). Frames are posted as transferable ArrayBuffers together
// with the frame's RMS level (for the page's meter).

const OUT_RATE = 16000;
const FRAME = OUT_RATE / 50; // 20 ms

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.phase = 0;
    this.sum = 0;
    this.count = 0;
    this.frame = new Int16Array(FRAME);
    this.filled = 0;
    this.energy = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const channel = input[0];
    for (let i = 0; i < channel.length; i++) {
      this.sum += channel[i];
      this.count += 1;
      this.phase += OUT_RATE;
      if (this.phase >= sampleRate) {
        this.phase -= sampleRate;
        const value = Math.max(-1, Math.min(1, this.sum / this.count));
        this.sum = 0;
        this.count = 0;
        this.frame[this.filled++] = value < 0 ? value * 0x8000 : value * 0x7fff;
        this.energy += value * value;
        if (this.filled === FRAME) {
          const level = Math.sqrt(this.energy / FRAME);
          this.port.postMessage({ pcm: this.frame.buffer, level }, [this.frame.buffer]);
          this.frame = new Int16Array(FRAME);
          this.filled = 0;
          this.energy = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("capture-processor", CaptureProcessor);
