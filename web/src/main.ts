// The voxroom page: join, talk to the agent, see its state, the transcript, the copilot's
// answers and each turn's latency; as an interview copilot's candidate, send it the resume and
// the job description. The connection itself is a VoiceSession (through LiveKit or direct, as
// GET /api/config says); logic that needs no DOM lives in its own modules.

import { type Connection, statusView } from './agentState';
import { LevelMeter } from './audioLevel';
import {
  CHAT_TOPIC,
  chatFailedMessage,
  chatNoAgentMessage,
  chatText,
  chatTooLong,
  chatTooLongMessage,
} from './chat';
import { accessCodeFromHash, parseConfig, type ServerConfig } from './config';
import {
  ATTR_SPEAK,
  COPILOT_CONTROL_TOPIC,
  COPILOT_TOPIC,
  CopilotAnswers,
  SpeechSwitch,
} from './copilot';
import {
  ATTR_CONTEXT_NAME,
  CONTEXT_STATUS_TOPIC,
  CONTEXT_TOPIC,
  CopilotDocuments,
  type DocumentName,
  isCopilot,
  kilobytes,
  MAX_DOCUMENT_BYTES,
  NO_RECEIPT_AFTER_S,
} from './copilotDocuments';
import { microphoneChoices } from './devices';
import { DirectSession } from './directSession';
import { LiveKitSession } from './livekitSession';
import {
  accessClosedMessage,
  accessCodeHint,
  joinMessage,
  micMessage,
  NO_AGENT_AFTER_S,
  noAgentMessage,
} from './messages';
import { formatLatency, METRICS_TOPIC, parseMetrics } from './metrics';
import {
  type CopilotChannel,
  JoinFailure,
  MicFailure,
  type SessionEvents,
  type VoiceSession,
} from './session';
import { type Speaker, Transcript, TRANSCRIPTION_TOPIC } from './transcript';

function element<T extends HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`index.html lacks #${id}`);
  return el as T;
}

const ui = {
  form: element<HTMLFormElement>('join-form'),
  room: element<HTMLInputElement>('room'),
  roomField: element<HTMLElement>('room-field'),
  name: element<HTMLInputElement>('name'),
  code: element<HTMLInputElement>('code'),
  codeField: element<HTMLElement>('code-field'),
  copilotField: element<HTMLElement>('copilot-field'),
  copilotMode: element<HTMLInputElement>('copilot-mode'),
  join: element<HTMLButtonElement>('join'),
  leave: element<HTMLButtonElement>('leave'),
  mode: element<HTMLElement>('mode'),
  status: element<HTMLElement>('status'),
  statusLabel: element<HTMLElement>('status-label'),
  statusHint: element<HTMLElement>('status-hint'),
  error: element<HTMLElement>('error'),
  errorText: element<HTMLElement>('error-text'),
  retryMic: element<HTMLButtonElement>('retry-mic'),
  startAudio: element<HTMLButtonElement>('start-audio'),
  controls: element<HTMLElement>('controls'),
  mute: element<HTMLButtonElement>('mute'),
  micSelect: element<HTMLSelectElement>('mic-select'),
  latency: element<HTMLElement>('latency'),
  documents: element<HTMLElement>('documents'),
  documentsLimit: element<HTMLElement>('documents-limit'),
  readiness: element<HTMLElement>('readiness'),
  transcript: element<HTMLOListElement>('transcript'),
  chatForm: element<HTMLFormElement>('chat-form'),
  chatInput: element<HTMLInputElement>('chat-input'),
  chatSend: element<HTMLButtonElement>('chat-send'),
  emptyTranscript: element<HTMLElement>('transcript-empty'),
  copilot: element<HTMLOListElement>('copilot'),
  emptyCopilot: element<HTMLElement>('copilot-empty'),
  speakField: element<HTMLElement>('speak-field'),
  speak: element<HTMLInputElement>('speak'),
  speakNote: element<HTMLElement>('speak-note'),
  audio: element<HTMLAudioElement>('agent-audio'),
};

/** Each document's file input and the line under it. */
interface DocumentField {
  readonly input: HTMLInputElement;
  readonly status: HTMLElement;
}
const documentFields: [DocumentName, DocumentField][] = [
  ['resume', { input: element('resume-file'), status: element('resume-status') }],
  ['job_description', { input: element('job-file'), status: element('job-status') }],
];

const CODE_KEY = 'voxroom.accessCode';

let config: ServerConfig | undefined;
let session: VoiceSession | undefined;
let muted = false;
let copilotJoined = false; // the session was joined with "Interview copilot" checked
let wakeLock: WakeLockSentinel | undefined;
const transcript = new Transcript();
const copilot = new CopilotAnswers();
const documents = new CopilotDocuments<File>();
const speech = new SpeechSwitch();
const meter = new LevelMeter();
const streamTopics = new Map<string, string>(); // open stream id -> topic
// Topics whose streams are read whole: open stream id -> text so far.
const WHOLE_TOPICS = new Set([METRICS_TOPIC, CONTEXT_STATUS_TOPIC, CHAT_TOPIC]);
const chatSenders = new Map<string, string>(); // open `lk.chat` stream id -> its sender
const wholeText = new Map<string, string>();

// For tests and for curious people at the console: how loud the agent's voice arrives.
(window as unknown as { __voxroom: object }).__voxroom = {
  remoteLevel: () => meter.level(),
  mode: () => config?.mode,
  subscribedAudio: () => (session instanceof LiveKitSession ? session.subscribedAudio() : []),
  // Where the agent's voice got to: the meter, the <audio> element, WebRTC's receiver.
  audioCheck: async () => ({
    meter: meter.describe(),
    element: { paused: ui.audio.paused, readyState: ui.audio.readyState },
    receiver: session instanceof LiveKitSession ? await session.agentAudioStats() : undefined,
  }),
};

const params = new URLSearchParams(location.search);
ui.room.value = params.get('room') ?? ui.room.value;
ui.name.value = params.get('name') ?? ui.name.value;
/** An access code link (`…#code=XYZ`) fills the field; the code leaves the address bar. */
function takeCodeFromLink(): void {
  const linkCode = accessCodeFromHash(location.hash);
  if (!linkCode) return;
  sessionStorage.setItem(CODE_KEY, linkCode);
  history.replaceState(null, '', location.pathname + location.search);
  ui.code.value = linkCode;
  if (ui.errorText.textContent === accessCodeHint) clearError();
}
ui.code.value = sessionStorage.getItem(CODE_KEY) ?? '';
takeCodeFromLink();
window.addEventListener('hashchange', takeCodeFromLink);

ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  void join();
});
ui.leave.addEventListener('click', () => void leave());
ui.chatForm.addEventListener('submit', (event) => {
  event.preventDefault(); // Enter in the box, or the Send button
  void sendChat();
});
ui.retryMic.addEventListener('click', () => {
  if (session) void enableMicrophone(session);
});
ui.startAudio.addEventListener('click', () => void playAgentAudio());
ui.mute.addEventListener('click', () => {
  muted = !muted;
  void session?.setMuted(muted);
  render();
});
ui.micSelect.addEventListener('change', () => {
  if (session) void enableMicrophone(session, ui.micSelect.value);
});
navigator.mediaDevices?.addEventListener('devicechange', () => void refreshDevices());
ui.copilotMode.addEventListener('change', () => render());
ui.documentsLimit.textContent = kilobytes(MAX_DOCUMENT_BYTES);
for (const [name, field] of documentFields) {
  field.input.addEventListener('change', () => {
    const file = field.input.files?.[0];
    if (!file) return;
    field.input.value = ''; // choosing the same file again must fire 'change': a resend
    if (documents.choose(name, file)) sendDocuments();
    render();
  });
}
ui.speak.addEventListener('change', () => {
  const channel = copilotChannel();
  if (!channel) return;
  channel.sendText(COPILOT_CONTROL_TOPIC, speech.ask(ui.speak.checked)).catch(() => {
    speech.clear(); // the switch shows the agent's state again
    render();
  });
  render();
});

async function loadConfig(): Promise<ServerConfig | undefined> {
  try {
    const response = await fetch('/api/config', { cache: 'no-store' });
    config = parseConfig(await response.json());
  } catch {
    config = undefined;
  }
  if (!config) {
    showError(joinMessage({ kind: 'web-unreachable' }));
    return undefined;
  }
  ui.mode.hidden = false;
  ui.mode.textContent = config.mode === 'direct' ? 'Direct connection' : 'Through LiveKit';
  ui.roomField.hidden = config.mode === 'direct'; // direct mode has one conversation, no rooms
  ui.codeField.hidden = config.access !== 'code';
  if (config.access === 'closed') showError(accessClosedMessage);
  else if (config.access === 'code' && !ui.code.value) showError(accessCodeHint);
  render();
  return config;
}

async function join(): Promise<void> {
  if (session) return;
  // Phones (and desktop browsers with strict autoplay rules) only let audio start inside a
  // user gesture: this click. Unlock the <audio> element and the level meter before the first
  // await; the agent's track is put into the element later.
  ui.audio.srcObject = new MediaStream();
  void ui.audio.play().catch(() => undefined);
  meter.unlock();
  void keepScreenOn(true);

  const cfg = config ?? (await loadConfig());
  if (!cfg || session) return;
  const events = eventsFor(() => s);
  const s: VoiceSession =
    cfg.mode === 'direct' ? new DirectSession(events) : new LiveKitSession(events);
  session = s;
  muted = false;
  copilotJoined = cfg.mode === 'livekit' && ui.copilotMode.checked;
  clearError();
  transcript.clear();
  copilot.clear();
  documents.resend(); // a new copilot holds none of them
  speech.clear();
  renderTranscript();
  renderCopilot();
  ui.latency.hidden = true;
  render();
  const accessCode = cfg.access === 'code' ? ui.code.value.trim() : '';
  try {
    await s.connect({
      room: roomName(),
      name: ui.name.value.trim(),
      accessCode,
      copilot: copilotJoined,
    });
  } catch (err) {
    if (session === s) {
      session = undefined;
      void keepScreenOn(false);
      await s.disconnect();
      const problem =
        err instanceof JoinFailure ? err.problem : { kind: 'other' as const, detail: String(err) };
      if (problem) showError(joinMessage(problem));
      render();
    }
    return;
  }
  if (accessCode) sessionStorage.setItem(CODE_KEY, accessCode);
  setTimeout(() => {
    if (session === s && !s.agentPresent()) showError(noAgentMessage);
  }, NO_AGENT_AFTER_S * 1000);
  render();
  // A copilot listens to the meeting's audio from `voxroom bridge`, not to this page.
  if (!copilotJoined) await enableMicrophone(s);
}

async function leave(): Promise<void> {
  const s = session;
  session = undefined;
  void keepScreenOn(false);
  documents.resend(); // for the next session's copilot
  ui.retryMic.hidden = true;
  ui.startAudio.hidden = true;
  setRemoteAudio(undefined);
  render();
  await s?.disconnect();
}

/** The session's events, ignored once it is no longer the page's session. */
function eventsFor(current: () => VoiceSession): SessionEvents {
  const live = () => session !== undefined && session === current();
  return {
    changed: () => {
      if (!live()) return;
      if (session?.agentPresent() && ui.errorText.textContent === noAgentMessage) clearError();
      sendDocuments(); // the copilot may have just started
      render();
    },
    ended: (message) => {
      if (!live()) return;
      session = undefined;
      void keepScreenOn(false);
      documents.resend();
      ui.retryMic.hidden = true;
      setRemoteAudio(undefined);
      render();
      showError(message);
    },
    remoteAudio: (track) => {
      if (live()) setRemoteAudio(track);
    },
    textOpened: (topic, stream) => {
      if (!live() || !session) return;
      streamTopics.set(stream.streamId, topic);
      if (topic === TRANSCRIPTION_TOPIC) transcript.open(stream, session.localIdentity());
      else if (topic === COPILOT_TOPIC) copilot.open(stream.streamId, stream.attributes);
      else if (WHOLE_TOPICS.has(topic)) wholeText.set(stream.streamId, '');
      if (topic === CHAT_TOPIC) chatSenders.set(stream.streamId, stream.senderIdentity);
    },
    textChunk: (streamId, text) => {
      const topic = streamTopics.get(streamId);
      if (topic === TRANSCRIPTION_TOPIC && transcript.append(streamId, text)) renderTranscript();
      else if (topic === COPILOT_TOPIC && copilot.append(streamId, text)) renderCopilot();
      else if (topic && WHOLE_TOPICS.has(topic)) {
        wholeText.set(streamId, (wholeText.get(streamId) ?? '') + text);
      }
    },
    textClosed: (streamId, attributes) => {
      const topic = streamTopics.get(streamId);
      streamTopics.delete(streamId);
      if (topic === TRANSCRIPTION_TOPIC) {
        if (transcript.close(streamId, attributes)) renderTranscript();
      } else if (topic === COPILOT_TOPIC) {
        if (copilot.close(streamId, attributes)) renderCopilot();
      } else if (topic && WHOLE_TOPICS.has(topic)) {
        const text = wholeText.get(streamId) ?? '';
        wholeText.delete(streamId);
        if (topic === METRICS_TOPIC) showLatency(text);
        else if (topic === CHAT_TOPIC) showChatReply(streamId, text);
        else if (documents.receipt(text)) render();
      }
    },
    data: (topic, text) => {
      if (live() && topic === METRICS_TOPIC) showLatency(text);
    },
  };
}

/** Send the box's text to the agent as a typed message; it shows at once as the user's. */
async function sendChat(): Promise<void> {
  const s = session;
  const text = chatText(ui.chatInput.value);
  if (!(s instanceof LiveKitSession) || text === undefined) return;
  if (chatTooLong(text)) {
    showError(chatTooLongMessage);
    return;
  }
  if (s.agentState() === undefined) {
    showError(chatNoAgentMessage);
    return;
  }
  ui.chatInput.value = '';
  transcript.typed(text);
  renderTranscript();
  try {
    await s.sendChat(text);
  } catch (err) {
    if (session === s) showError(chatFailedMessage(err instanceof Error ? err.message : ''));
  }
}

/** What the agent said on `lk.chat` (a refused message), shown in the transcript. */
function showChatReply(streamId: string, text: string): void {
  const sender = chatSenders.get(streamId);
  chatSenders.delete(streamId);
  const s = session;
  if (!(s instanceof LiveKitSession) || !text.trim() || sender !== s.agentId()) return;
  transcript.notice(text.trim());
  renderTranscript();
}

/** The room typed in, or the one the field suggests. */
function roomName(): string {
  return ui.room.value.trim() || ui.room.placeholder;
}

/** The copilot's side of the page's session, when it was joined as a copilot's candidate. */
function copilotChannel(): CopilotChannel | undefined {
  return copilotJoined ? session?.copilot() : undefined;
}

/** Send the chosen documents, once a copilot is in the room to read them. */
function sendDocuments(): void {
  const s = session;
  const channel = copilotChannel();
  if (!s || !channel || !isCopilot(channel.agentAttributes())) return;
  for (const [name, file] of documents.take()) void sendDocument(s, channel, name, file);
}

async function sendDocument(
  s: VoiceSession,
  channel: CopilotChannel,
  name: DocumentName,
  file: File,
): Promise<void> {
  let failure: string | undefined;
  try {
    await channel.sendFile(CONTEXT_TOPIC, file, { [ATTR_CONTEXT_NAME]: name });
  } catch (err) {
    failure = err instanceof Error ? err.message : String(err);
  }
  if (session !== s) return;
  documents.sent(name, file, failure);
  render();
  // The agent acknowledges every document, a refusal included: silence means it never read it.
  setTimeout(() => {
    if (session === s && documents.unconfirmed(name, file)) render();
  }, NO_RECEIPT_AFTER_S * 1000);
}

async function enableMicrophone(s: VoiceSession, deviceId?: string): Promise<void> {
  ui.retryMic.hidden = true;
  if (!window.isSecureContext || !navigator.mediaDevices?.getUserMedia) {
    showError(micMessage('insecure'));
    return;
  }
  try {
    await s.enableMicrophone(deviceId);
    await s.setMuted(muted);
    if (ui.errorText.textContent !== noAgentMessage) clearError();
  } catch (err) {
    if (session !== s) return;
    const failure = err instanceof MicFailure ? err : new MicFailure('other', String(err));
    showError(micMessage(failure.problem, failure.detail));
    ui.retryMic.hidden = false;
  }
  await refreshDevices();
}

async function refreshDevices(): Promise<void> {
  const devices = await navigator.mediaDevices?.enumerateDevices().catch(() => []);
  const choices = microphoneChoices(devices ?? []);
  const active = session?.microphoneId();
  ui.micSelect.replaceChildren(
    ...choices.map((choice) => {
      const option = document.createElement('option');
      option.value = choice.id;
      option.textContent = choice.label;
      option.selected = choice.id === active;
      return option;
    }),
  );
  ui.micSelect.disabled = choices.length < 2;
}

function setRemoteAudio(track: MediaStreamTrack | undefined): void {
  ui.audio.srcObject = track ? new MediaStream([track]) : null;
  meter.attach(track);
  if (track) void playAgentAudio();
}

/** Play the agent's voice; when the browser wants a gesture first, ask for a tap. */
async function playAgentAudio(): Promise<void> {
  meter.unlock();
  try {
    await ui.audio.play();
    ui.startAudio.hidden = true;
  } catch {
    ui.startAudio.hidden = session === undefined;
  }
}

/** A phone's screen stays on while talking (where the browser offers a wake lock). */
async function keepScreenOn(on: boolean): Promise<void> {
  if (!on) {
    await wakeLock?.release().catch(() => undefined);
    wakeLock = undefined;
  } else if (!wakeLock && 'wakeLock' in navigator) {
    wakeLock = await navigator.wakeLock.request('screen').catch(() => undefined);
  }
}

// The browser drops the wake lock when the page is hidden; take it again on return.
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible' && session) {
    wakeLock = undefined;
    void keepScreenOn(true);
  }
});

function showLatency(text: string): void {
  const turn = parseMetrics(text);
  if (!turn) return;
  ui.latency.textContent = formatLatency(turn);
  ui.latency.hidden = false;
}

function render(): void {
  const connection: Connection = session?.connection() ?? 'idle';
  const inSession = session !== undefined;
  ui.join.disabled = inSession || config?.access === 'closed';
  ui.leave.disabled = !inSession;
  for (const input of [ui.room, ui.name, ui.code]) input.disabled = inSession;
  const channel = copilotChannel();
  const view = statusView(
    connection,
    session?.agentState(),
    channel && {
      room: roomName(),
      identity: session?.localIdentity().identity ?? '',
      meetingAudio: channel.meetingAudio(),
    },
  );
  ui.status.className = `status status-${view.key}`;
  ui.status.dataset.state = view.key;
  ui.statusLabel.textContent = view.label;
  ui.statusHint.textContent =
    muted && connection === 'connected' ? 'Your microphone is muted.' : view.hint;
  ui.controls.hidden =
    copilotJoined || (connection !== 'connected' && connection !== 'reconnecting');
  // Typing goes through LiveKit's `lk.chat`: the voice agent's, not the copilot's nor direct's.
  ui.chatForm.hidden =
    !(session instanceof LiveKitSession) || copilotJoined || connection !== 'connected';
  // The agent reads typed messages once its conversation runs: when it shows its state.
  ui.chatSend.disabled = session?.agentState() === undefined;
  ui.mute.textContent = muted ? 'Unmute' : 'Mute';
  ui.mute.setAttribute('aria-pressed', String(muted));
  renderCopilotSetup();
}

/** The copilot checkbox, the documents and the "Read answers aloud" switch. */
function renderCopilotSetup(): void {
  const livekit = config?.mode === 'livekit'; // direct mode has no copilot
  ui.copilotField.hidden = !livekit;
  ui.copilotMode.disabled = session !== undefined;
  const shown = livekit && (session ? copilotJoined : ui.copilotMode.checked);
  ui.documents.hidden = !shown;
  ui.speakField.hidden = !shown;
  ui.emptyTranscript.textContent = shown
    ? 'What the copilot hears the interviewer say appears here.'
    : 'What you and the agent say appears here.';
  for (const [name, field] of documentFields) {
    field.status.textContent = documents.status(name);
  }
  const agent = copilotChannel()?.agentAttributes();
  ui.readiness.textContent = documents.readiness(agent);
  const view = speech.view(agent?.[ATTR_SPEAK]);
  ui.speakField.dataset.agent = agent?.[ATTR_SPEAK] ?? ''; // what the agent says, for tests
  ui.speak.checked = view.checked;
  ui.speak.disabled = view.disabled;
  ui.speakNote.textContent = view.note;
  ui.speakNote.hidden = !shown || !view.note;
}

const SPEAKER_LABELS: Record<Speaker, string> = {
  user: 'You',
  agent: 'Agent',
  interviewer: 'Interviewer',
};

function renderTranscript(): void {
  const list = ui.transcript;
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  const lines = transcript.lines();
  list.replaceChildren(
    ...lines.map((line) => {
      const li = document.createElement('li');
      li.className = [
        'line',
        `line-${line.speaker}`,
        ...(line.final ? [] : ['line-partial']),
        ...(line.cut ? ['line-cut'] : []),
        ...(line.typed ? ['line-typed'] : []),
        ...(line.notice ? ['line-notice'] : []),
      ].join(' ');
      const who = document.createElement('span');
      who.className = 'who';
      who.textContent = SPEAKER_LABELS[line.speaker];
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = line.text;
      li.append(who, text);
      if (line.cut) {
        const cut = document.createElement('span');
        cut.className = 'cut';
        cut.textContent = 'interrupted';
        li.append(cut);
      }
      return li;
    }),
  );
  ui.emptyTranscript.hidden = lines.length > 0;
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function renderCopilot(): void {
  const answers = copilot.list();
  ui.copilot.replaceChildren(
    ...answers.map((answer) => {
      const li = document.createElement('li');
      li.className = answer.done ? 'answer' : 'answer answer-pending';
      if (answer.question) {
        const question = document.createElement('p');
        question.className = 'question';
        question.textContent = answer.question;
        li.append(question);
      }
      const text = document.createElement('p');
      text.className = 'text';
      text.textContent = answer.text;
      li.append(text);
      if (answer.status && answer.status !== 'complete') {
        const status = document.createElement('p');
        status.className = 'status-note';
        status.textContent = answer.status === 'failed' ? 'The answer failed.' : 'Cancelled.';
        li.append(status);
      }
      return li;
    }),
  );
  ui.emptyCopilot.hidden = answers.length > 0;
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
void loadConfig();
