// What the page needs of a connection to the agent, whichever way it goes: through a LiveKit
// room (livekitSession.ts) or straight to the voxroom process over WebRTC (directSession.ts).
// main.ts renders; a session only reports.

import type { Connection } from './agentState';
import { type JoinProblem, type MicProblem, micProblemOf } from './messages';
import type { Attributes, LocalIdentity, StreamInfo } from './transcript';

/** Raised by `connect`; carries what to tell the user (undefined: nothing, e.g. cancelled). */
export class JoinFailure extends Error {
  constructor(readonly problem: JoinProblem | undefined) {
    super(problem?.kind ?? 'cancelled');
  }
}

/** Raised by the microphone methods. */
export class MicFailure extends Error {
  constructor(
    readonly problem: MicProblem,
    readonly detail = '',
  ) {
    super(problem);
  }

  /** The failure for what the browser threw when asked for the microphone. */
  static of(err: unknown): MicFailure {
    return new MicFailure(micProblemOf(err), err instanceof Error ? err.message : String(err));
  }
}

/** What a session reports as it happens. Text arrives as streams: open, chunks, close. */
export interface SessionEvents {
  /** The connection, the agent's presence or its state changed. */
  changed(): void;
  /** The connection ended without the user leaving; the message says why. */
  ended(message: string): void;
  /** The agent's voice, to play and to measure; undefined when it went away. */
  remoteAudio(track: MediaStreamTrack | undefined): void;
  textOpened(topic: string, stream: StreamInfo): void;
  textChunk(streamId: string, text: string): void;
  /** `attributes` are the stream's attributes after the close (a trailer may add some). */
  textClosed(streamId: string, attributes: Attributes | undefined): void;
  /** A whole message on a data topic (LiveKit data packets). */
  data(topic: string, text: string): void;
}

export interface JoinRequest {
  readonly room: string;
  readonly name: string;
  /** The access code for the voxroom server; empty when none is needed. */
  readonly accessCode: string;
  /** The agent is to be this user's interview copilot (LiveKit only). */
  readonly copilot: boolean;
}

/** The copilot's side of a session: what the page sends the agent, and its attributes. */
export interface CopilotChannel {
  /** The agent's attributes; undefined while no agent is there. */
  agentAttributes(): Attributes | undefined;
  /** `file` as a byte stream to the agent alone. */
  sendFile(topic: string, file: File, attributes: Attributes): Promise<void>;
  /** `text` as a text stream to the agent alone. */
  sendText(topic: string, text: string): Promise<void>;
  /** This page's bridge (`voxroom bridge --candidate <this identity>`) publishes the meeting's
   * audio; anyone else's `meeting-audio` track is not heard by the copilot, and does not count. */
  meetingAudio(): boolean;
}

export interface VoiceSession {
  readonly mode: 'livekit' | 'direct';
  connect(request: JoinRequest): Promise<void>;
  disconnect(): Promise<void>;
  connection(): Connection;
  /** The agent's `lk.agent.state`, or undefined while no agent is there. */
  agentState(): string | undefined;
  agentPresent(): boolean;
  localIdentity(): LocalIdentity;
  /** Start (or restart) the microphone, on `deviceId` when given. */
  enableMicrophone(deviceId?: string): Promise<void>;
  setMuted(muted: boolean): Promise<void>;
  /** The microphone in use, when the browser says. */
  microphoneId(): string | undefined;
  /** The copilot's side; undefined where there is no copilot (direct mode). */
  copilot(): CopilotChannel | undefined;
}

/** The Authorization header for the voxroom server's join endpoints. */
export function authHeaders(accessCode: string): Record<string, string> {
  return accessCode ? { authorization: `Bearer ${accessCode}` } : {};
}

/** A failed answer of a voxroom join endpoint, as the problem to tell the user. */
export async function refusal(response: Response): Promise<JoinFailure> {
  const body: { error?: string } = await response.json().catch(() => ({}));
  return new JoinFailure({
    kind: 'token-rejected',
    status: response.status,
    message: body.error ?? '',
  });
}

/** POSTs `body` to the voxroom join endpoint `path` with the access code, and returns its JSON
 * answer once `complete` finds in it what the caller needs. A server out of reach, a refusal
 * or an answer without it is a JoinFailure. */
export async function askToJoin<T>(
  path: string,
  accessCode: string,
  body: unknown,
  complete: (answer: Partial<T>) => boolean,
): Promise<T> {
  let response: Response;
  try {
    response = await fetch(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...authHeaders(accessCode) },
      body: JSON.stringify(body),
    });
  } catch {
    throw new JoinFailure({ kind: 'web-unreachable' });
  }
  if (!response.ok) throw await refusal(response);
  const answer: Partial<T> = await response.json().catch(() => ({}));
  if (!complete(answer)) throw await refusal(response);
  return answer as T;
}
