// Plain sentences for what can go wrong, so the page never shows a stack trace or an error
// code alone. No DOM and no livekit-client here: main.ts classifies, this module words.

export type MicProblem = 'insecure' | 'denied' | 'not-found' | 'busy' | 'other';

/** What a getUserMedia error means to the user, by its DOMException name. */
export function micProblemOf(err: unknown): MicProblem {
  const name = err instanceof Error || err instanceof DOMException ? err.name : '';
  switch (name) {
    case 'NotAllowedError':
    case 'PermissionDeniedError':
    case 'SecurityError':
      return 'denied';
    case 'NotFoundError':
    case 'DevicesNotFoundError':
    case 'OverconstrainedError':
      return 'not-found';
    case 'NotReadableError':
    case 'TrackStartError':
    case 'AbortError':
      return 'busy';
    default:
      return 'other';
  }
}

export function micMessage(problem: MicProblem, detail = ''): string {
  switch (problem) {
    case 'insecure':
      return (
        'The browser only allows the microphone on pages opened over HTTPS or on localhost. ' +
        'Open this page as http://127.0.0.1 on the machine running voxroom, or serve it over HTTPS.'
      );
    case 'denied':
      return (
        'The browser is not allowed to use the microphone. Allow microphone access for this ' +
        'page (in the address bar or the site settings), then press "Try microphone again".'
      );
    case 'not-found':
      return (
        'No microphone was found. Connect one or check the sound settings of your system, ' +
        'then press "Try microphone again".'
      );
    case 'busy':
      return (
        'The microphone is in use by another program or could not be opened. Close the other ' +
        'program, then press "Try microphone again".'
      );
    case 'other':
      return `The microphone could not be started${detail ? ` (${detail})` : ''}.`;
  }
}

export type JoinProblem =
  | { kind: 'web-unreachable' }
  | { kind: 'token-rejected'; status: number; message: string }
  | { kind: 'livekit-unreachable'; url: string }
  | { kind: 'livekit-refused'; url: string }
  | { kind: 'livekit-timeout'; url: string }
  | { kind: 'direct-failed' }
  | { kind: 'other'; detail: string };

export function joinMessage(problem: JoinProblem): string {
  switch (problem.kind) {
    case 'web-unreachable':
      return 'The voxroom server did not answer. Check that it is still running, then try again.';
    case 'token-rejected':
      return problem.message
        ? `The voxroom server refused to let you join: ${problem.message}`
        : `The voxroom server refused to let you join (HTTP ${problem.status}).`;
    case 'livekit-unreachable':
      return (
        `The LiveKit server at ${problem.url} could not be reached. ` +
        'Check that it is running and that this device can reach that address.'
      );
    case 'livekit-refused':
      return (
        `The LiveKit server at ${problem.url} refused the join token. ` +
        'The token may have expired, or voxroom and LiveKit use different API keys.'
      );
    case 'livekit-timeout':
      return (
        `The LiveKit server at ${problem.url} did not finish the connection in time. ` +
        'A firewall may be blocking its UDP ports.'
      );
    case 'direct-failed':
      return (
        'The audio connection to the voxroom server could not be set up. ' +
        'A firewall may be blocking its UDP ports, or the server is on another network.'
      );
    case 'other':
      return `Joining failed: ${problem.detail}`;
  }
}

export const NO_AGENT_AFTER_S = 20;

export const noAgentMessage =
  `No agent has joined the room after ${NO_AGENT_AFTER_S} seconds. Check that an agent worker ` +
  '("voxroom agent") is running and connected to the same LiveKit server.';

export const accessClosedMessage =
  'This voxroom server only lets its own machine join. Ask its operator for an access code ' +
  'link, or open the page on the machine running voxroom.';

export const accessCodeHint = 'This voxroom server needs an access code from this device.';

export const directLostMessage =
  'The connection to the agent ended. Press Join to connect again.';

export const roomLostMessage = 'The connection to the room ended. Press Join to connect again.';
