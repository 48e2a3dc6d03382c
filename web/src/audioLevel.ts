// How loud the agent's voice is at this browser, through a WebAudio analyser on the remote
// track. The page shows nothing of it yet; tests read it (window.__voxroom.remoteLevel()).

/** Root mean square of samples in [-1, 1]. */
export function rms(samples: Float32Array): number {
  if (samples.length === 0) return 0;
  let sum = 0;
  for (const s of samples) sum += s * s;
  return Math.sqrt(sum / samples.length);
}

export class LevelMeter {
  private context: AudioContext | undefined;
  private source: MediaStreamAudioSourceNode | undefined;
  private analyser: AnalyserNode | undefined;
  private buffer: Float32Array<ArrayBuffer> = new Float32Array(0);

  /** Create (or resume) the audio context; call inside a user gesture so it may run. */
  unlock(): void {
    this.context ??= new AudioContext();
    void this.context.resume().catch(() => undefined);
  }

  /** Measure `track` from now on; undefined stops measuring. */
  attach(track: MediaStreamTrack | undefined): void {
    this.source?.disconnect();
    this.source = undefined;
    if (!track) return;
    this.unlock();
    const context = this.context as AudioContext;
    this.analyser ??= Object.assign(context.createAnalyser(), { fftSize: 1024 });
    this.buffer = new Float32Array(this.analyser.fftSize);
    this.source = context.createMediaStreamSource(new MediaStream([track]));
    this.source.connect(this.analyser);
  }

  /** Whether it measures a track, and the audio context's state ("running" when it may). */
  describe(): { measuring: boolean; context: string } {
    return { measuring: this.source !== undefined, context: this.context?.state ?? 'none' };
  }

  /** The level of the last ~20 ms, 0 (silence) to 1. */
  level(): number {
    if (!this.analyser || !this.source) return 0;
    this.analyser.getFloatTimeDomainData(this.buffer);
    return rms(this.buffer);
  }
}
