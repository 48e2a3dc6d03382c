import { describe, expect, it } from 'vitest';

import { statusView } from '../src/agentState';
import { joinMessage, micMessage } from '../src/messages';

describe('statusView', () => {
  it('shows the agent state once connected', () => {
    expect(statusView('connected', 'listening').label).toBe('Listening');
    expect(statusView('connected', 'thinking').key).toBe('thinking');
    expect(statusView('connected', 'speaking').key).toBe('speaking');
  });

  it('waits while no agent (or an agent not yet in conversation) is in the room', () => {
    expect(statusView('connected', undefined).key).toBe('waiting');
    expect(statusView('connected', 'initializing').key).toBe('waiting');
    expect(statusView('connected', 'idle').key).toBe('waiting');
  });

  it("tells a copilot's candidate whether the meeting's audio is in the room", () => {
    const waiting = statusView('connected', 'listening', {
      room: 'interview',
      identity: 'user-1a2b',
      meetingAudio: false,
    });
    expect(waiting.label).toBe('Copilot on');
    expect(waiting.hint).toBe(
      'Waiting for the meeting\'s audio: run "voxroom bridge --room interview --candidate ' +
        'user-1a2b" on the computer the meeting plays on.',
    );
    const hearing = statusView('connected', 'speaking', {
      room: 'interview',
      identity: 'user-1a2b',
      meetingAudio: true,
    });
    expect([hearing.key, hearing.hint]).toEqual([
      'listening',
      'It hears the meeting; its answers appear below.',
    ]);
    // no copilot in the room yet, or not connected: as for the voice assistant
    const copilot = { room: 'r', identity: 'u', meetingAudio: true };
    expect(statusView('connected', undefined, copilot).key).toBe('waiting');
    expect(statusView('connecting', 'listening', copilot).key).toBe('connecting');
  });

  it('ignores a stale agent state while not connected', () => {
    expect(statusView('idle', 'speaking').key).toBe('idle');
    expect(statusView('connecting', 'speaking').key).toBe('connecting');
    expect(statusView('reconnecting', 'listening').key).toBe('reconnecting');
  });
});

describe('messages', () => {
  it('says what to do in plain sentences', () => {
    expect(micMessage('denied')).toMatch(/not allowed to use the microphone/);
    expect(micMessage('other', 'OverconstrainedError')).toContain('(OverconstrainedError)');
    expect(joinMessage({ kind: 'livekit-unreachable', url: 'ws://127.0.0.1:7880' })).toContain(
      'ws://127.0.0.1:7880 could not be reached',
    );
    expect(joinMessage({ kind: 'token-rejected', status: 400, message: 'Room name is too long.' })).toBe(
      'The voxroom server refused to let you join: Room name is too long.',
    );
  });
});
