import { describe, expect, it } from 'vitest';

import { type LocalIdentity, type StreamInfo, Transcript } from '../src/transcript';

const me: LocalIdentity = { identity: 'user-1', trackSids: new Set(['TR_mic']) };

function stream(streamId: string, attributes: Record<string, string>, sender = 'agent-1'): StreamInfo {
  return { streamId, attributes, senderIdentity: sender };
}

/** A stream from the agent opened with `attributes`, and `text` as its first chunk. */
function begin(t: Transcript, streamId: string, attributes: Record<string, string>, text: string): void {
  t.open(stream(streamId, attributes), me);
  t.append(streamId, text);
}

/** `attributes` of a segment's stream, marked as its final text. */
function final(attributes: Record<string, string>): Record<string, string> {
  return { ...attributes, 'lk.transcription_final': 'true' };
}

/** A whole stream from the agent: `begin`, then closed. */
function send(t: Transcript, streamId: string, attributes: Record<string, string>, text: string): void {
  begin(t, streamId, attributes, text);
  t.close(streamId, attributes);
}

describe('Transcript', () => {
  it('replaces a partial segment with later text for the same segment id', () => {
    const t = new Transcript();
    const partial = { 'lk.segment_id': 'SG_1', 'lk.transcribed_track_id': 'TR_mic', 'lk.transcription_final': 'false' };
    send(t, 's1', partial, 'what is');
    t.open(stream('s2', partial), me);
    // until the newer stream speaks, the older text stays on screen
    expect(t.lines()).toEqual([{ segmentId: 'SG_1', speaker: 'user', text: 'what is', final: false, cut: false }]);
    t.append('s2', 'what is the time');
    t.close('s2', partial);
    send(t, 's3', final(partial), 'What is the time?');
    expect(t.lines()).toEqual([
      { segmentId: 'SG_1', speaker: 'user', text: 'What is the time?', final: true, cut: false },
    ]);
  });

  it('accumulates deltas of one stream and takes finality from its trailer', () => {
    const t = new Transcript();
    const header = { 'lk.segment_id': 'SG_a', 'lk.transcribed_track_id': 'TR_agent', 'lk.transcription_final': 'false' };
    t.open(stream('s1', header), me);
    expect(t.append('s1', 'It is ')).toBe(true);
    t.append('s1', 'noon.');
    expect(t.lines()).toEqual([{ segmentId: 'SG_a', speaker: 'agent', text: 'It is noon.', final: false, cut: false }]);
    expect(t.close('s1', final(header))).toBe(true);
    expect(t.lines()[0]?.final).toBe(true);
  });

  it('ignores chunks of a stream that a newer one superseded', () => {
    const t = new Transcript();
    const attrs = { 'lk.segment_id': 'SG_1' };
    t.open(stream('old', attrs), me);
    begin(t, 'new', attrs, 'newer');
    expect(t.append('old', ' late')).toBe(false);
    expect(t.lines().map((l) => l.text)).toEqual(['newer']);
  });

  it('keeps segments in the order they started and tells the speakers apart', () => {
    const t = new Transcript();
    t.open(stream('u', { 'lk.segment_id': 'SG_u' }, 'user-1'), me);
    t.open(stream('a', { 'lk.segment_id': 'SG_a' }, 'agent-1'), me);
    t.append('a', 'Hello.');
    t.append('u', 'Hi');
    // sent by the agent on the user's behalf: the transcribed track says whose words they are
    t.open(stream('u2', { 'lk.segment_id': 'SG_u2', 'lk.transcribed_track_id': 'TR_mic' }), me);
    t.append('u2', 'Bye');
    expect(t.lines().map((l) => [l.speaker, l.text])).toEqual([
      ['user', 'Hi'],
      ['agent', 'Hello.'],
      ['user', 'Bye'],
    ]);
  });

  it("takes the copilot's interviewer mark over the sender and the track", () => {
    const t = new Transcript();
    const heard = {
      'lk.segment_id': 'interviewer-3',
      'lk.transcribed_track_id': 'TR_meeting',
      'lk.transcription_final': 'true',
      'voxroom.speaker': 'interviewer',
    };
    t.open(stream('i', heard, 'agent-1'), me);
    t.append('i', 'Where did you study?');
    t.open(stream('a', { 'lk.segment_id': 'SG_a' }, 'agent-1'), me);
    t.append('a', 'Munich.');
    expect(t.lines().map((l) => [l.speaker, l.text, l.final])).toEqual([
      ['interviewer', 'Where did you study?', true],
      ['agent', 'Munich.', false],
    ]);
  });

  it('falls back to the stream id when a stream has no segment id', () => {
    const t = new Transcript();
    t.open(stream('s1', {}), me);
    t.append('s1', 'one');
    t.open(stream('s2', {}), me);
    t.append('s2', 'two');
    expect(t.lines().map((l) => l.text)).toEqual(['one', 'two']);
  });

  it('marks an agent segment cut when its final text is shorter than what it showed', () => {
    const t = new Transcript();
    const partial = { 'lk.segment_id': 'agent-1', 'lk.transcription_final': 'false' };
    begin(t, 'p1', partial, 'Paris is the capital');
    begin(t, 'p2', partial, 'Paris is the capital of France. It is old.');
    send(t, 'f', final(partial), 'Paris is the capital of');
    expect(t.lines()).toEqual([
      { segmentId: 'agent-1', speaker: 'agent', text: 'Paris is the capital of', final: true, cut: true },
    ]);
  });

  it('does not mark a whole answer, or the user, as cut', () => {
    const t = new Transcript();
    const partial = { 'lk.segment_id': 'agent-1', 'lk.transcription_final': 'false' };
    begin(t, 'p', partial, 'It is  noon. ');
    send(t, 'f', final(partial), 'It is noon.');
    const user = { 'lk.segment_id': 'user-0', 'lk.transcribed_track_id': 'TR_mic' };
    t.open(stream('u1', { ...user, 'lk.transcription_final': 'false' }), me);
    t.append('u1', 'what is the time now');
    t.open(stream('u2', { ...user, 'lk.transcription_final': 'true' }), me);
    t.append('u2', 'What time?');
    expect(t.lines().map((l) => [l.speaker, l.cut])).toEqual([
      ['agent', false],
      ['user', false],
    ]);
  });

  it('shows a typed message at once, then the agent\'s copy of it as the user\'s turn', () => {
    const t = new Transcript();
    const agentSaid = { 'lk.segment_id': 'agent-1', 'lk.transcription_final': 'true' };
    send(t, 'a1', agentSaid, 'Hello.');
    t.typed('What  is the weather?');
    expect(t.lines()[1]).toEqual({
      segmentId: 'typed-1', speaker: 'user', text: 'What  is the weather?', final: true,
      cut: false, typed: true,
    });
    // The agent sends the turn back on the user's behalf: one line, the agent's.
    const turn = { 'lk.segment_id': 'user-0', 'lk.transcribed_track_id': 'TR_mic', 'lk.transcription_final': 'true' };
    send(t, 'u1', turn, 'What is the weather?');
    expect(t.lines().map((l) => [l.speaker, l.text, l.typed])).toEqual([
      ['agent', 'Hello.', undefined],
      ['user', 'What is the weather?', undefined],
    ]);
  });

  it('folds a typed message into the spoken turn it was merged with', () => {
    const t = new Transcript();
    const spoken = { 'lk.segment_id': 'user-0', 'lk.transcribed_track_id': 'TR_mic', 'lk.transcription_final': 'false' };
    send(t, 'p1', spoken, 'and tomorrow');
    t.typed('In Oslo?');
    expect(t.lines().map((l) => l.text)).toEqual(['and tomorrow', 'In Oslo?']);
    send(t, 'f1', final(spoken), 'In Oslo? and tomorrow?');
    expect(t.lines().map((l) => l.text)).toEqual(['In Oslo? and tomorrow?']);
  });

  it('keeps a typed message that an earlier turn happened to hold', () => {
    const t = new Transcript();
    const turn = { 'lk.segment_id': 'user-0', 'lk.transcribed_track_id': 'TR_mic', 'lk.transcription_final': 'true' };
    send(t, 'u1', turn, 'Yes.');
    t.typed('Yes.'); // not answered yet: it stays shown
    expect(t.lines().map((l) => [l.text, l.typed])).toEqual([['Yes.', undefined], ['Yes.', true]]);
  });

  it("shows the agent's refusal as a notice", () => {
    const t = new Transcript();
    t.typed('x'.repeat(10));
    t.notice('Your message was not sent to the agent: it is longer than 2000 characters.');
    const [typed, notice] = t.lines();
    expect(typed?.typed).toBe(true);
    expect(notice).toMatchObject({ speaker: 'agent', notice: true, final: true });
    t.clear();
    expect(t.lines()).toEqual([]);
  });
});
