// What the big status panel shows: the page's own connection progress until the agent is in
// the room, then the agent's state from its `lk.agent.state` attribute. No DOM here.

export const ATTR_AGENT_STATE = 'lk.agent.state';

export type Connection = 'idle' | 'connecting' | 'connected' | 'reconnecting';

/** The panel's look; the key is also the CSS class that gives it its colour. */
export type ViewKey =
  | 'idle'
  | 'connecting'
  | 'reconnecting'
  | 'waiting'
  | 'listening'
  | 'thinking'
  | 'speaking';

export interface StatusView {
  readonly key: ViewKey;
  readonly label: string;
  readonly hint: string;
}

const VIEWS: Record<ViewKey, StatusView> = {
  idle: { key: 'idle', label: 'Not connected', hint: 'Press Join to talk to the agent.' },
  connecting: { key: 'connecting', label: 'Connecting…', hint: 'Joining the room.' },
  reconnecting: {
    key: 'reconnecting',
    label: 'Reconnecting…',
    hint: 'The connection dropped; trying again.',
  },
  waiting: { key: 'waiting', label: 'Waiting for the agent…', hint: 'The agent is joining.' },
  listening: { key: 'listening', label: 'Listening', hint: 'Go ahead and talk.' },
  thinking: { key: 'thinking', label: 'Thinking…', hint: 'The agent is preparing an answer.' },
  speaking: { key: 'speaking', label: 'Speaking', hint: 'Talk over it to interrupt.' },
};

/** What the copilot needs to answer: the meeting's audio, from `voxroom bridge`. */
export interface CopilotView {
  readonly room: string;
  /** This page's identity in the room: the bridge names it (`--candidate`). */
  readonly identity: string;
  /** Someone in the room publishes the `meeting-audio` track. */
  readonly meetingAudio: boolean;
}

/**
 * `agentState` is the agent participant's `lk.agent.state` attribute, or undefined while no
 * agent is in the room. LiveKit agents also report "initializing" and "idle" (not yet or no
 * longer in a conversation); to the person in front of the page that is still waiting. A
 * copilot (`copilot` given) listens to the meeting, not to this page: its panel says whether
 * the meeting's audio is in the room.
 */
export function statusView(
  connection: Connection,
  agentState: string | undefined,
  copilot?: CopilotView,
): StatusView {
  if (connection === 'idle') return VIEWS.idle;
  if (connection === 'connecting') return VIEWS.connecting;
  if (connection === 'reconnecting') return VIEWS.reconnecting;
  switch (agentState) {
    case 'listening':
    case 'thinking':
    case 'speaking':
      return copilot ? copilotView(copilot) : VIEWS[agentState];
    default:
      return VIEWS.waiting;
  }
}

function copilotView({ room, identity, meetingAudio }: CopilotView): StatusView {
  return {
    key: 'listening',
    label: 'Copilot on',
    hint: meetingAudio
      ? 'It hears the meeting; its answers appear below.'
      : `Waiting for the meeting's audio: run "voxroom bridge --room ${room} --candidate ` +
        `${identity}" on the computer the meeting plays on.`,
  };
}
