// The voxroom page: join a room, talk to the agent, see its state and the transcript.
// Logic that needs no DOM lives in transcript.ts, agentState.ts and messages.ts.

import {
  ConnectionError,
  ConnectionErrorReason,
  ConnectionState,
  DisconnectReason,
  MediaDeviceFailure,
  type Participant,
  ParticipantKind,
  type RemoteParticipant,
  type RemoteTrack,
  Room,
  RoomEvent,
  type TextStreamReader,
  Track,
} from 'livekit-client';

import { ATTR_AGENT_STATE, type Connection, statusView } from './agentState';
import {
  type JoinProblem,
  joinMessage,
  type MicProblem,
  micMessage,
  NO_AGENT_AFTER_S,
  noAgentMessage,
} from './messages';
import { type LocalIdentity, Transcript, TRANSCRIPTION_TOPIC } from './transcript';

function element<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html lacks #${id}`);
  return el as T;
}

const ui = {
  form: element<HTMLFormElement>('join-form'),
  room: element<HTMLInputElement>('room'),
  name: element<HTMLInputElement>('name'),
  join: element<HTMLButtonElement>('join'),
  leave: element<HTMLButtonElement>('leave'),
  status: element<HTMLElement>('status'),
  statusLabel: element<HTMLElement>('status-label'),
  statusHint: element<HTMLElement>('status-hint'),
  error: element<HTMLElement>('error'),
  errorText: element<HTMLElement>('error-text'),
  retryMic: element<HTMLButtonElement>('retry-mic'),
  startAudio: element<HTMLButtonElement>('start-audio'),
  transcript: element<HTMLOListElement>('transcript'),
  emptyTranscript: element<HTMLElement>('transcript-empty'),
  audio: element<HTMLAudioElement>('agent-audio'),
};

/** Raised on the way to joining; carries what to tell the user. */
class JoinFailure extends Error {
  constructor(readonly problem: JoinProblem) {
    super(problem.kind);
  }
}

let room: Room | undefined;
const transcript = new Transcript();

const params = new URLSearchParams(location.search);
ui.room.value = params.get('room') ?? ui.room.value;
ui.name.value = params.get('name') ?? ui.name.value;

ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  void join();
});
ui.leave.addEventListener('click', () => void leave());
ui.retryMic.addEventListener('click', () => {
  if (room) void enableMicrophone(room);
});
ui.startAudio.addEventListener('click', () => {
  void room?.startAudio().catch(() => undefined).then(refreshAudioPrompt);
});

async function join(): Promise<void> {
  if (room) return;
  const r = new Room({
    audioCaptureDefaults: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
  });
  room = r;
  listen(r);
  // Phones (and desktop browsers with strict autoplay rules) only let audio start inside a
  // user gesture: this click. Unlock both LiveKit's audio and our <audio> element now, before
  // the first await; the agent's track is attached to the element later.
  const audioUnlocked = r.startAudio().catch(() => undefined);
  ui.audio.srcObject = new MediaStream();
  ui.audio.play().catch(() => undefined);

  clearError();
  transcript.clear();
  renderTranscript();
  const roomName = ui.room.value.trim() || ui.room.placeholder;
  let url = '';
  render();
  try {
    const grant = await fetchToken(roomName, ui.name.value.trim());
    url = grant.url;
    if (room !== r) return; // Leave was pressed meanwhile
    await r.connect(url, grant.token);
  } catch (err) {
    if (room === r) {
      room = undefined;
      await r.disconnect();
      const problem = joinProblem(err, url);
      if (problem) showError(joinMessage(problem));
      render();
    }
    return;
  }
  setTimeout(() => {
    if (room === r && !agentOf(r)) showError(noAgentMessage);
  }, NO_AGENT_AFTER_S * 1000);
  await audioUnlocked;
  refreshAudioPrompt();
  await enableMicrophone(r);
}

async function leave(): Promise<void> {
  const r = room;
  room = undefined;
  ui.retryMic.hidden = true;
  ui.startAudio.hidden = true;
  render();
  await r?.disconnect();
}

async function fetchToken(roomName: string, name: string): Promise<{ token: string; url: string }> {
  let response: Response;
  try {
    response = await fetch('/api/token', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ room: roomName, name }),
    });
  } catch {
    throw new JoinFailure({ kind: 'web-unreachable' });
  }
  const body: { token?: string; url?: string; error?: string } = await response
    .json()
    .catch(() => ({}));
  if (!response.ok || !body.token || !body.url) {
    throw new JoinFailure({
      kind: 'token-rejected',
      status: response.status,
      message: body.error ?? '',
    });
  }
  return { token: body.token, url: body.url };
}

/** What to tell the user about a failed join; undefined when there is nothing to tell. */
function joinProblem(err: unknown, url: string): JoinProblem | undefined {
  if (err instanceof JoinFailure) return err.problem;
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

async function enableMicrophone(r: Room): Promise<void> {
  ui.retryMic.hidden = true;
  if (!window.isSecureContext || !navigator.mediaDevices?.getUserMedia) {
    showError(micMessage('insecure'));
    return;
  }
  try {
    await r.localParticipant.setMicrophoneEnabled(true);
    clearError();
  } catch (err) {
    if (room !== r) return;
    showError(micMessage(micProblem(err), err instanceof Error ? err.message : String(err)));
    ui.retryMic.hidden = false;
  }
}

function micProblem(err: unknown): MicProblem {
  switch (MediaDeviceFailure.getFailure(err)) {
    case MediaDeviceFailure.PermissionDenied:
      return 'denied';
    case MediaDeviceFailure.NotFound:
      return 'not-found';
    case MediaDeviceFailure.DeviceInUse:
      return 'busy';
    default:
      return 'other';
  }
}

function listen(r: Room): void {
  let joined = false; // a failed join is reported by join(), not as a lost connection
  r.on(RoomEvent.Connected, () => {
    joined = true;
  })
    .on(RoomEvent.ConnectionStateChanged, render)
    .on(RoomEvent.ParticipantConnected, (p: RemoteParticipant) => {
      if (isAgent(p) && ui.errorText.textContent === noAgentMessage) clearError();
      render();
    })
    .on(RoomEvent.ParticipantDisconnected, render)
    .on(RoomEvent.ParticipantAttributesChanged, render)
    .on(RoomEvent.TrackSubscribed, (track: RemoteTrack, _pub, participant: RemoteParticipant) => {
      if (track.kind === Track.Kind.Audio && isAgent(participant)) track.attach(ui.audio);
    })
    .on(RoomEvent.TrackUnsubscribed, (track: RemoteTrack) => {
      track.detach(ui.audio);
    })
    .on(RoomEvent.AudioPlaybackStatusChanged, () => {
      if (room === r) refreshAudioPrompt();
    })
    .on(RoomEvent.Disconnected, (reason?: DisconnectReason) => {
      if (room !== r || !joined) return; // we left on purpose, or never got in
      room = undefined;
      ui.retryMic.hidden = true;
      ui.startAudio.hidden = true;
      render();
      if (reason !== DisconnectReason.CLIENT_INITIATED) {
        showError('The connection to the room ended. Press Join to connect again.');
      }
    });
  r.registerTextStreamHandler(TRANSCRIPTION_TOPIC, (reader, sender) => {
    void readTranscription(r, reader, sender.identity);
  });
}

async function readTranscription(r: Room, reader: TextStreamReader, sender: string): Promise<void> {
  const streamId = reader.info.id;
  const local: LocalIdentity = {
    identity: r.localParticipant.identity,
    trackSids: new Set(r.localParticipant.trackPublications.keys()),
  };
  transcript.open({ streamId, attributes: reader.info.attributes, senderIdentity: sender }, local);
  try {
    for await (const chunk of reader) {
      if (transcript.append(streamId, chunk)) renderTranscript();
    }
  } catch {
    // an aborted stream keeps the text it carried
  }
  // the trailer's attributes (final or not) are merged into info when the stream ends
  if (transcript.close(streamId, reader.info.attributes)) renderTranscript();
}

function isAgent(p: Participant): boolean {
  return p.kind === ParticipantKind.AGENT || ATTR_AGENT_STATE in p.attributes;
}

function agentOf(r: Room): RemoteParticipant | undefined {
  return [...r.remoteParticipants.values()].find(isAgent);
}

/** Where the page stands; a room that has not started connecting is still fetching its token. */
function connectionOf(r: Room | undefined): Connection {
  switch (r?.state) {
    case undefined:
      return 'idle';
    case ConnectionState.Connected:
      return 'connected';
    case ConnectionState.Reconnecting:
    case ConnectionState.SignalReconnecting:
      return 'reconnecting';
    default:
      return 'connecting';
  }
}

function render(): void {
  const connection = connectionOf(room);
  const inRoom = connection !== 'idle';
  ui.join.disabled = inRoom;
  ui.leave.disabled = !inRoom;
  ui.room.disabled = inRoom;
  ui.name.disabled = inRoom;
  const agent = room ? agentOf(room) : undefined;
  const view = statusView(connection, agent?.attributes[ATTR_AGENT_STATE]);
  ui.status.className = `status status-${view.key}`;
  ui.statusLabel.textContent = view.label;
  ui.statusHint.textContent = view.hint;
}

function refreshAudioPrompt(): void {
  ui.startAudio.hidden = !room || room.canPlaybackAudio;
}

function renderTranscript(): void {
  const list = ui.transcript;
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const lines = transcript.lines();
  list.replaceChildren(
    ...lines.map((line) => {
      const li = document.createElement('li');
      li.className = `line line-${line.speaker}${line.final ? '' : ' line-partial'}`;
      const who = document.createElement('span');
      who.className = 'who';
      who.textContent = line.speaker === 'user' ? 'You' : 'Agent';
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = line.text;
      li.append(who, text);
      return li;
    }),
  );
  ui.emptyTranscript.hidden = lines.length > 0;
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function showError(message: string): void {
  ui.errorText.textContent = message;
  ui.error.hidden = false;
}

function clearError(): void {
  ui.error.hidden = true;
  ui.errorText.textContent = '';
}

render();
