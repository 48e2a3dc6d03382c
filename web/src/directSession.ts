// The conversation straight with the voxroom process (`voxroom demo --direct`), no LiveKit:
// one RTCPeerConnection, an SDP offer/answer over HTTP (POST /api/direct/offer), the agent's
// voice as the remote audio track, and its state and transcripts on a data channel in the
// shapes a LiveKit room carries them (directProtocol.ts).

import { ATTR_AGENT_STATE, type Connection } from './agentState';
import { parseDirectMessage } from './directProtocol';
import { directLostMessage } from './messages';
import {
  askToJoin,
  type JoinRequest,
  JoinFailure,
  MicFailure,
  type SessionEvents,
  type VoiceSession,
} from './session';
import type { LocalIdentity } from './transcript';

const CHANNEL_LABEL = 'voxroom';
const GATHER_TIMEOUT_MS = 2000;
const CONNECT_TIMEOUT_MS = 15000;

export class DirectSession implements VoiceSession {
  readonly mode = 'direct';
  private pc: RTCPeerConnection | undefined;
  private sender: RTCRtpSender | undefined;
  private mic: MediaStreamTrack | undefined;
  private muted = false;
  private joined = false;
  private leaving = false;
  private identity = 'you';
  /** the agent's attributes; undefined until it has said anything */
  private agentAttributes: Record<string, string> | undefined;

  constructor(private readonly events: SessionEvents) {}

  async connect(request: JoinRequest): Promise<void> {
    const pc = new RTCPeerConnection();
    this.pc = pc;
    // The microphone joins later (replaceTrack): a refused microphone still lets the user
    // hear the agent and try again.
    this.sender = pc.addTransceiver('audio', { direction: 'sendrecv' }).sender;
    const channel = pc.createDataChannel(CHANNEL_LABEL);
    channel.onmessage = (event) => this.onMessage(event.data);
    channel.onclose = () => this.lost();
    pc.ontrack = (event) => {
      if (event.track.kind === 'audio') this.events.remoteAudio(event.track);
    };
    pc.onconnectionstatechange = () => {
      this.events.changed();
      if (pc.connectionState === 'failed') this.lost();
    };
    this.events.changed();

    await pc.setLocalDescription(await pc.createOffer());
    await gatheringComplete(pc, GATHER_TIMEOUT_MS);
    const answer = await askToJoin<{ sdp: string; identity?: string }>(
      '/api/direct/offer',
      request.accessCode,
      { sdp: pc.localDescription?.sdp, type: 'offer' },
      (a) => !!a.sdp,
    );
    if (this.leaving) throw new JoinFailure(undefined);
    this.identity = answer.identity ?? this.identity;
    await pc.setRemoteDescription({ type: 'answer', sdp: answer.sdp });
    if (!(await connected(pc, CONNECT_TIMEOUT_MS))) {
      throw new JoinFailure(this.leaving ? undefined : { kind: 'direct-failed' });
    }
    this.joined = true;
  }

  async disconnect(): Promise<void> {
    this.leaving = true;
    this.mic?.stop();
    this.pc?.close();
    this.events.changed();
  }

  connection(): Connection {
    switch (this.pc?.connectionState) {
      case undefined:
      case 'new':
      case 'connecting':
        return this.leaving ? 'idle' : 'connecting';
      case 'connected':
        return 'connected';
      case 'disconnected':
        return 'reconnecting'; // ICE may find its way back by itself
      default:
        return 'idle';
    }
  }

  agentState(): string | undefined {
    return this.agentAttributes?.[ATTR_AGENT_STATE];
  }

  agentPresent(): boolean {
    return this.agentAttributes !== undefined;
  }

  localIdentity(): LocalIdentity {
    return { identity: this.identity, trackSids: new Set() };
  }

  copilot(): undefined {
    return undefined; // the direct connection serves the voice assistant only
  }

  async enableMicrophone(deviceId?: string): Promise<void> {
    let track: MediaStreamTrack | undefined;
    try {
      const stream = await navigator.mediaDevices.getUserMedia({
        audio: {
          deviceId: deviceId ? { exact: deviceId } : undefined,
          echoCancellation: true,
          noiseSuppression: true,
          autoGainControl: true,
        },
      });
      track = stream.getAudioTracks()[0];
    } catch (err) {
      throw MicFailure.of(err);
    }
    if (!track) throw new MicFailure('not-found');
    if (this.leaving || !this.sender) {
      track.stop();
      return;
    }
    track.enabled = !this.muted;
    await this.sender.replaceTrack(track);
    this.mic?.stop();
    this.mic = track;
  }

  async setMuted(muted: boolean): Promise<void> {
    this.muted = muted;
    if (this.mic) this.mic.enabled = !muted; // a disabled track sends silence
  }

  microphoneId(): string | undefined {
    return this.mic?.getSettings().deviceId;
  }



  private onMessage(data: unknown): void {
    const message = parseDirectMessage(data);
    if (!message) return;
    if (message.type === 'attributes') {
      this.agentAttributes = { ...this.agentAttributes, ...message.attributes };
      this.events.changed();
      return;
    }
    const { id, topic, sender, attributes, text } = message;
    this.events.textOpened(topic, { streamId: id, attributes, senderIdentity: sender });
    this.events.textChunk(id, text);
    this.events.textClosed(id, attributes);
  }

  private lost(): void {
    if (!this.joined || this.leaving) return;
    this.leaving = true;
    this.mic?.stop();
    this.pc?.close();
    this.events.changed();
    this.events.ended(directLostMessage);
  }
}

/** No trickle ICE: the offer goes out with the candidates found within `timeoutMs`. */
function gatheringComplete(pc: RTCPeerConnection, timeoutMs: number): Promise<void> {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      pc.removeEventListener('icegatheringstatechange', check);
      clearTimeout(timer);
      resolve();
    };
    const check = () => {
      if (pc.iceGatheringState === 'complete') done();
    };
    const timer = setTimeout(done, timeoutMs);
    pc.addEventListener('icegatheringstatechange', check);
  });
}

/** Whether `pc` connects within `timeoutMs` (false when it fails or closes first). */
function connected(pc: RTCPeerConnection, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const settle = (ok: boolean) => {
      pc.removeEventListener('connectionstatechange', check);
      clearTimeout(timer);
      resolve(ok);
    };
    const check = () => {
      const state = pc.connectionState;
      if (state === 'connected') settle(true);
      else if (state === 'failed' || state === 'closed') settle(false);
    };
    const timer = setTimeout(() => settle(false), timeoutMs);
    pc.addEventListener('connectionstatechange', check);
    check();
  });
}
