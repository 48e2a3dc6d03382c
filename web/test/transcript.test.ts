import { describe, expect, it } from 'vitest';

import { type LocalIdentity, type StreamInfo, Transcript } from '../src/transcript';

const me: LocalIdentity = { identity: 'user-1', trackSids: new Set(['TR_mic']) };

function stream(streamId: string, attributes: Record<string, string>, sender = 'agent-1'): StreamInfo {
  return { streamId, attributes, senderIdentity: sender };
}

describe('Transcript', () => {
  it('replaces a partial segment with later text for the same segment id', () => {
    const t = new Transcript();
    const partial = { 'lk.segment_id': 'SG_1', 'lk.transcribed_track_id': 'TR_mic', 'lk.transcription_final': 'false' };
    t.open(stream('s1', partial), me);
    t.append('s1', 'what is');
    t.close('s1', partial);
    t.open(stream('s2', partial), me);
    // until the newer stream speaks, the older text stays on screen
    expect(t.lines()).toEqual([{ segmentId: 'SG_1', speaker: 'user', text: 'what is', final: false, cut: false }]);
    t.append('s2', 'what is the time');
    t.close('s2', partial);
    const final = { ...partial, 'lk.transcription_final': 'true' };
    t.open(stream('s3', final), me);
    t.append('s3', 'What is the time?');
    t.close('s3', final);
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
    expect(t.close('s1', { ...header, 'lk.transcription_final': 'true' })).toBe(true);
    expect(t.lines()[0]?.final).toBe(true);
  });

  it('ignores chunks of a stream that a newer one superseded', () => {
    const t = new Transcript();
    const attrs = { 'lk.segment_id': 'SG_1' };
    t.open(stream('old', attrs), me);
    t.open(stream('new', attrs), me);
    t.append('new', 'newer');
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
    t.open(stream('p1', partial), me);
    t.append('p1', 'Paris is the capital');
    t.open(stream('p2', partial), me);
    t.append('p2', 'Paris is the capital of France. It is old.');
    const final = { ...partial, 'lk.transcription_final': 'true' };
    t.open(stream('f', final), me);
    t.append('f', 'Paris is the capital of');
    t.close('f', final);
    expect(t.lines()).toEqual([
      { segmentId: 'agent-1', speaker: 'agent', text: 'Paris is the capital of', final: true, cut: true },
    ]);
  });

  it('does not mark a whole answer, or the user, as cut', () => {
    const t = new Transcript();
    const partial = { 'lk.segment_id': 'agent-1', 'lk.transcription_final': 'false' };
    t.open(stream('p', partial), me);
    t.append('p', 'It is  noon. ');
    const final = { ...partial, 'lk.transcription_final': 'true' };
    t.open(stream('f', final), me);
    t.append('f', 'It is noon.');
    t.close('f', final);
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
});
