// The conversation transcript, built from LiveKit text streams on the `lk.transcription` topic.
// No DOM here: main.ts renders what this module computes.
//
// Two sending styles exist and both must read right:
// - one stream per segment whose chunks are deltas (the agent's words as they are spoken);
// - one short stream per update, each carrying the whole text so far (the user's partials).
// So: the text of a segment is everything its *latest* stream carried; a newer stream for the
// same segment id replaces the text of the older one.
//
// An agent segment whose final text has fewer words than it showed before was cut: the user
// talked over the agent, and the final text is what was heard (the agent sends it so).
//
// A typed message shows at once as the user's (`typed`); the agent then sends it back as the
// user's turn, a final user segment holding its words (alone, or merged with what the user was
// saying). The typed line gives way to that segment, so the message is shown once. What the
// agent says on `lk.chat` (a refused message) is a `notice`.

export const TRANSCRIPTION_TOPIC = 'lk.transcription';
export const ATTR_SEGMENT_ID = 'lk.segment_id';
export const ATTR_TRACK_ID = 'lk.transcribed_track_id';
export const ATTR_FINAL = 'lk.transcription_final';
/** Set by the copilot (agent/copilot/room.py) on what it heard of the meeting. */
export const ATTR_SPEAKER = 'voxroom.speaker';
export const SPEAKER_INTERVIEWER = 'interviewer';

/** The interviewer: the meeting's audio, which the copilot transcribes for its candidate. */
export type Speaker = 'user' | 'agent' | typeof SPEAKER_INTERVIEWER;
export type Attributes = Readonly<Record<string, string>>;

export interface TranscriptLine {
  readonly segmentId: string;
  readonly speaker: Speaker;
  readonly text: string;
  readonly final: boolean;
  /** the agent was interrupted: `text` is what the user heard of a longer answer */
  readonly cut: boolean;
  /** typed on this page, not yet confirmed by the agent as the user's turn */
  readonly typed?: true;
  /** the agent's reply on `lk.chat` (a refusal), not words it spoke */
  readonly notice?: true;
}

/** What main.ts knows about one incoming stream when it opens. */
export interface StreamInfo {
  readonly streamId: string;
  readonly attributes: Attributes | undefined;
  readonly senderIdentity: string;
}

/** Who we are, to tell the user's words from the agent's. */
export interface LocalIdentity {
  readonly identity: string;
  /** sids of the tracks this browser publishes (its microphone). */
  readonly trackSids: ReadonlySet<string>;
}

/**
 * The user's words are the ones transcribed from a track this browser publishes. An agent may
 * send them on the user's behalf, so the track id decides first and the sender second. The
 * copilot marks the interviewer's words itself.
 */
export function speakerOf(stream: StreamInfo, local: LocalIdentity): Speaker {
  if (stream.attributes?.[ATTR_SPEAKER] === SPEAKER_INTERVIEWER) return SPEAKER_INTERVIEWER;
  const trackId = stream.attributes?.[ATTR_TRACK_ID];
  if (trackId && local.trackSids.has(trackId)) return 'user';
  return stream.senderIdentity === local.identity ? 'user' : 'agent';
}

export function segmentIdOf(stream: StreamInfo): string {
  return stream.attributes?.[ATTR_SEGMENT_ID] || stream.streamId;
}

export function isFinal(attributes: Attributes | undefined): boolean {
  return attributes?.[ATTR_FINAL] === 'true';
}

interface Segment {
  speaker: Speaker;
  text: string;
  final: boolean;
  /** the stream that speaks for this segment now; chunks of older streams are ignored */
  streamId: string;
  /** the current stream has not sent text yet: the older text stays shown until it does */
  stale: boolean;
  /** the most words the segment showed before it was final */
  peakWords: number;
  /** a local line: typed here, or the agent's notice */
  kind?: 'typed' | 'notice';
  /** when (in the transcript's own count) its text was last set while final, or typed */
  at: number;
}

function squeezed(text: string): string {
  return text.trim().split(/\s+/).join(' ');
}

function wordCount(text: string): number {
  const trimmed = text.trim();
  return trimmed ? trimmed.split(/\s+/).length : 0;
}

export class Transcript {
  private readonly segments = new Map<string, Segment>(); // insertion order = display order
  private readonly streams = new Map<string, string>(); // open stream id -> segment id
  private count = 0; // orders typed lines and the user's final text
  private local = 0; // local lines so far, for their ids

  /** A stream opened: it becomes the voice of its segment. */
  open(stream: StreamInfo, local: LocalIdentity): void {
    const segmentId = segmentIdOf(stream);
    this.streams.set(stream.streamId, segmentId);
    const update = { speaker: speakerOf(stream, local), final: isFinal(stream.attributes) };
    const existing = this.segments.get(segmentId);
    if (existing) {
      Object.assign(existing, update, { streamId: stream.streamId, stale: true });
    } else {
      this.segments.set(segmentId, {
        ...update,
        text: '',
        streamId: stream.streamId,
        stale: false,
        peakWords: 0,
        at: 0,
      });
    }
  }

  /** A chunk of text (a delta) arrived on a stream. Returns whether the transcript changed. */
  append(streamId: string, delta: string): boolean {
    const segment = this.current(streamId);
    if (!segment || !delta) return false;
    segment.text = segment.stale ? delta : segment.text + delta;
    segment.stale = false;
    if (!segment.final) segment.peakWords = Math.max(segment.peakWords, wordCount(segment.text));
    else segment.at = ++this.count;
    return true;
  }

  /**
   * A stream ended; `attributes` are its attributes after the close (a trailer may have marked
   * it final). Returns whether the transcript changed.
   */
  close(streamId: string, attributes: Attributes | undefined): boolean {
    const segment = this.current(streamId);
    this.streams.delete(streamId);
    if (!segment || segment.final || !isFinal(attributes)) return false;
    segment.final = true;
    segment.at = ++this.count;
    return true;
  }

  /** The user typed `text` (sent to the agent): shown at once as theirs. */
  typed(text: string): void {
    this.addLocal('user', text, 'typed');
  }

  /** The agent's message on `lk.chat` (a refused message). */
  notice(text: string): void {
    this.addLocal('agent', text, 'notice');
  }

  lines(): TranscriptLine[] {
    const out: TranscriptLine[] = [];
    for (const [segmentId, s] of this.segments) {
      const text = s.text.trim();
      if (!text || (s.kind === 'typed' && this.confirmed(s))) continue;
      const cut = s.final && s.speaker === 'agent' && wordCount(text) < s.peakWords;
      const kind = s.kind === undefined ? {} : { [s.kind]: true as const };
      out.push({ segmentId, speaker: s.speaker, text, final: s.final, cut, ...kind });
    }
    return out;
  }

  clear(): void {
    this.segments.clear();
    this.streams.clear();
  }

  private addLocal(speaker: Speaker, text: string, kind: 'typed' | 'notice'): void {
    this.segments.set(`${kind}-${++this.local}`, {
      speaker,
      text,
      final: true,
      streamId: '',
      stale: false,
      peakWords: 0,
      kind,
      at: ++this.count,
    });
  }

  /** The agent has sent the typed line back as the user's words, since it was typed. */
  private confirmed(typed: Segment): boolean {
    const words = squeezed(typed.text);
    for (const s of this.segments.values()) {
      if (s.kind === undefined && s.speaker === 'user' && s.final && s.at > typed.at &&
          squeezed(s.text).includes(words)) {
        return true;
      }
    }
    return false;
  }

  private current(streamId: string): Segment | undefined {
    const segmentId = this.streams.get(streamId);
    const segment = segmentId === undefined ? undefined : this.segments.get(segmentId);
    return segment?.streamId === streamId ? segment : undefined;
  }
}
