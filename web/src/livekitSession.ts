// The conversation through a LiveKit room: a join token from the voxroom server, then
// livekit-client. The agent is the room's agent participant; its state is its
// `lk.agent.state` attribute and the transcripts come as `lk.transcription` text streams.
// A copilot's documents and control messages, and the user's typed messages (`lk.chat`), go
// to the agent alone.

import {
  ConnectionError,
  ConnectionErrorReason,
  ConnectionState,
  DisconnectReason,
  type Participant,
  ParticipantKind,
  RemoteAudioTrack,
  RemoteParticipant,
  type RemoteTrack,
  Room,
  RoomEvent,
  type TextStreamReader,
  Track,
} from 'livekit-client';

import { ATTR_AGENT_STATE, type Connection } from './agentState';
import { CHAT_TOPIC } from './chat';
import { ATTR_BRIDGE_CANDIDATE, COPILOT_TOPIC, MEETING_TRACK } from './copilot';
import { CONTEXT_STATUS_TOPIC } from './copilotDocuments';
import { type JoinProblem, roomLostMessage } from './messages';
import { METRICS_TOPIC } from './metrics';
import {
  askToJoin,
  type CopilotChannel,
  type JoinRequest,
  JoinFailure,
  MicFailure,
  type SessionEvents,
  type VoiceSession,
} from './session';
import { type Attributes, type LocalIdentity, TRANSCRIPTION_TOPIC } from './transcript';

const TEXT_TOPICS = [
  TRANSCRIPTION_TOPIC,
  COPILOT_TOPIC,
  METRICS_TOPIC,
  CONTEXT_STATUS_TOPIC,
  CHAT_TOPIC,
];

export class LiveKitSession implements VoiceSession, CopilotChannel {
  readonly mode = 'livekit';
  private readonly room: Room;
  private joined = false; // a failed join is reported by connect(), not as a lost connection
  private leaving = false;

  constructor(private readonly events: SessionEvents) {
    this.room = new Room({
      audioCaptureDefaults: {
        echoCancellation: true,
        noiseSuppression: true,
        autoGainControl: true,
      },
    });
    this.listen();
  }

  async connect(request: JoinRequest): Promise<void> {
    // Phones only let audio start inside a user gesture: this runs from the Join click,
    // before the first await.
    const audioUnlocked = this.room.startAudio().catch(() => undefined);
    const { token, url } = await fetchToken(request);
    if (this.leaving) throw new JoinFailure(undefined);
    try {
      // Only the agent's audio is played: the rest (a copilot's meeting-audio, other people)
      // would be downloaded and decoded for nothing.
      await this.room.connect(url, token, { autoSubscribe: false });
    } catch (err) {
      throw new JoinFailure(joinProblem(err, url));
    }
    this.joined = true;
    for (const p of this.room.remoteParticipants.values()) subscribeIfAgent(p);
    await audioUnlocked;
  }

  async disconnect(): Promise<void> {
    this.leaving = true;
    await this.room.disconnect();
  }

  connection(): Connection {
    switch (this.room.state) {
      case ConnectionState.Connected:
        return 'connected';
      case ConnectionState.Reconnecting:
      case ConnectionState.SignalReconnecting:
        return 'reconnecting';
      case ConnectionState.Disconnected:
        return this.joined ? 'idle' : 'connecting'; // before connect(): fetching the token
      default:
        return 'connecting';
    }
  }

  agentState(): string | undefined {
    return this.agent()?.attributes[ATTR_AGENT_STATE];
  }

  agentPresent(): boolean {
    return this.agent() !== undefined;
  }

  localIdentity(): LocalIdentity {
    const local = this.room.localParticipant;
    return { identity: local.identity, trackSids: new Set(local.trackPublications.keys()) };
  }

  async enableMicrophone(deviceId?: string): Promise<void> {
    try {
      if (deviceId) await this.room.switchActiveDevice('audioinput', deviceId);
      await this.room.localParticipant.setMicrophoneEnabled(true);
    } catch (err) {
      throw MicFailure.of(err);
    }
  }

  async setMuted(muted: boolean): Promise<void> {
    const mic = this.room.localParticipant.getTrackPublication(Track.Source.Microphone);
    if (muted) await mic?.mute();
    else await mic?.unmute();
  }

  microphoneId(): string | undefined {
    return this.room.getActiveDevice('audioinput');
  }

  copilot(): CopilotChannel {
    return this;
  }

  agentAttributes(): Attributes | undefined {
    return this.agent()?.attributes;
  }

  async sendFile(topic: string, file: File, attributes: Attributes): Promise<void> {
    // streamBytes, not sendFile: only a byte stream carries attributes (the document's name).
    const data = new Uint8Array(await file.arrayBuffer());
    const writer = await this.room.localParticipant.streamBytes({
      topic,
      name: file.name,
      mimeType: file.type || 'application/octet-stream',
      totalSize: data.byteLength,
      attributes: { ...attributes },
      destinationIdentities: [this.agentIdentity()],
    });
    await writer.write(data);
    await writer.close();
  }

  async sendText(topic: string, text: string): Promise<void> {
    await this.room.localParticipant.sendText(text, {
      topic,
      destinationIdentities: [this.agentIdentity()],
    });
  }

  /** A typed message to the agent: a user turn like a spoken one. */
  async sendChat(text: string): Promise<void> {
    await this.sendText(CHAT_TOPIC, text);
  }

  /** The agent's identity, when it is in the room. */
  agentId(): string | undefined {
    return this.agent()?.identity;
  }

  /** The names of the remote audio tracks this page receives (only the agent's). */
  subscribedAudio(): string[] {
    return [...this.room.remoteParticipants.values()].flatMap((p) =>
      [...p.trackPublications.values()]
        .filter((t) => t.kind === Track.Kind.Audio && t.isSubscribed)
        .map((t) => t.trackName),
    );
  }

  /** What WebRTC says of the agent's audio received here (packets, decoded energy), for
   * telling a network problem from a playback one. */
  async agentAudioStats(): Promise<object | undefined> {
    for (const pub of this.agent()?.trackPublications.values() ?? []) {
      if (pub.track instanceof RemoteAudioTrack) return pub.track.getReceiverStats();
    }
    return undefined;
  }

  meetingAudio(): boolean {
    const me = this.room.localParticipant.identity;
    return [...this.room.remoteParticipants.values()].some(
      (p) =>
        p.attributes[ATTR_BRIDGE_CANDIDATE] === me &&
        [...p.trackPublications.values()].some((t) => t.trackName === MEETING_TRACK),
    );
  }

  private agentIdentity(): string {
    const agent = this.agent();
    if (!agent) throw new Error('no agent is in the room');
    return agent.identity;
  }

  private agent(): RemoteParticipant | undefined {
    return [...this.room.remoteParticipants.values()].find(isAgent);
  }

  private listen(): void {
    const changed = () => this.events.changed();
    this.room
      .on(RoomEvent.ConnectionStateChanged, changed)
      .on(RoomEvent.ParticipantConnected, (p: RemoteParticipant) => {
        subscribeIfAgent(p);
        changed();
      })
      .on(RoomEvent.ParticipantDisconnected, changed)
      .on(RoomEvent.ParticipantAttributesChanged, (_attrs, p: Participant) => {
        if (p instanceof RemoteParticipant) subscribeIfAgent(p);
        changed();
      })
      .on(RoomEvent.TrackPublished, (_pub, p: RemoteParticipant) => {
        subscribeIfAgent(p);
        changed();
      })
      .on(RoomEvent.TrackUnpublished, changed)
      .on(RoomEvent.TrackSubscribed, (track: RemoteTrack, _pub, p: RemoteParticipant) => {
        if (track.kind === Track.Kind.Audio && isAgent(p)) {
          this.events.remoteAudio(track.mediaStreamTrack);
        }
      })
      .on(RoomEvent.TrackUnsubscribed, (track: RemoteTrack, _pub, p: RemoteParticipant) => {
        if (track.kind === Track.Kind.Audio && isAgent(p)) this.events.remoteAudio(undefined);
      })
      .on(RoomEvent.DataReceived, (payload: Uint8Array, _p, _kind, topic?: string) => {
        if (topic) this.events.data(topic, new TextDecoder().decode(payload));
      })
      .on(RoomEvent.Disconnected, (reason?: DisconnectReason) => {
        if (!this.joined || this.leaving) return; // we left on purpose, or never got in
        changed();
        if (reason !== DisconnectReason.CLIENT_INITIATED) this.events.ended(roomLostMessage);
      });
    for (const topic of TEXT_TOPICS) {
      this.room.registerTextStreamHandler(topic, (reader, sender) => {
        void this.readText(topic, reader, sender.identity);
      });
    }
  }

  private async readText(topic: string, reader: TextStreamReader, sender: string): Promise<void> {
    const streamId = reader.info.id;
    this.events.textOpened(topic, {
      streamId,
      attributes: reader.info.attributes,
      senderIdentity: sender,
    });
    try {
      for await (const chunk of reader) this.events.textChunk(streamId, chunk);
    } catch {
      // an aborted stream keeps the text it carried
    }
    // the trailer's attributes (final or not) are merged into info when the stream ends
    this.events.textClosed(streamId, reader.info.attributes);
  }
}

async function fetchToken(request: JoinRequest): Promise<{ token: string; url: string }> {
  const answer = await askToJoin<{ token: string; url: string }>(
    '/api/token',
    request.accessCode,
    { room: request.room, name: request.name, ...(request.copilot ? { copilot: true } : {}) },
    (a) => !!a.token && !!a.url,
  );
  return { token: answer.token, url: answer.url };
}

/** What to tell the user about a failed connect; undefined when there is nothing to tell. */
function joinProblem(err: unknown, url: string): JoinProblem | undefined {
  if (err instanceof ConnectionError) {
    switch (err.reason) {
      case ConnectionErrorReason.NotAllowed:
        return { kind: 'livekit-refused', url };
      case ConnectionErrorReason.ServerUnreachable:
      case ConnectionErrorReason.WebSocket:
        return { kind: 'livekit-unreachable', url };
      case ConnectionErrorReason.Timeout:
        return { kind: 'livekit-timeout', url };
      case ConnectionErrorReason.Cancelled:
        return undefined;
    }
  }
  return { kind: 'other', detail: err instanceof Error ? err.message : String(err) };
}

/** Subscribe to the audio of `p` when it is the agent (the room joins with autoSubscribe off). */
function subscribeIfAgent(p: RemoteParticipant): void {
  if (!isAgent(p)) return;
  for (const pub of p.trackPublications.values()) {
    if (pub.kind === Track.Kind.Audio && !pub.isSubscribed) pub.setSubscribed(true);
  }
}

function isAgent(p: Participant): boolean {
  return p.kind === ParticipantKind.AGENT || ATTR_AGENT_STATE in p.attributes;
}
