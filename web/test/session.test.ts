import { describe, expect, it } from 'vitest';

import { rms } from '../src/audioLevel';
import { accessCodeFromHash, parseConfig } from '../src/config';
import { CopilotAnswers } from '../src/copilot';
import { microphoneChoices } from '../src/devices';
import { parseDirectMessage } from '../src/directProtocol';
import { joinMessage, micProblemOf } from '../src/messages';
import { formatLatency, parseMetrics } from '../src/metrics';
import { authHeaders, JoinFailure, refusal } from '../src/session';

describe('server config', () => {
  it('accepts what the server sends and nothing else', () => {
    expect(parseConfig({ mode: 'direct', access: 'open' })).toEqual({ mode: 'direct', access: 'open' });
    expect(parseConfig({ mode: 'livekit', access: 'code', extra: 1 })).toEqual({
      mode: 'livekit',
      access: 'code',
    });
    expect(parseConfig({ mode: 'sfu', access: 'open' })).toBeUndefined();
    expect(parseConfig({ mode: 'direct' })).toBeUndefined();
    expect(parseConfig(null)).toBeUndefined();
    expect(parseConfig('direct')).toBeUndefined();
  });

  it('reads the access code from the link fragment', () => {
    expect(accessCodeFromHash('#code=s3cr%2Bt')).toBe('s3cr+t');
    expect(accessCodeFromHash('code=abc&x=1')).toBe('abc');
    expect(accessCodeFromHash('')).toBe('');
    expect(accessCodeFromHash('#other=1')).toBe('');
  });

  it('sends the access code as a bearer token, only when there is one', () => {
    expect(authHeaders('abc')).toEqual({ authorization: 'Bearer abc' });
    expect(authHeaders('')).toEqual({});
  });

  it("turns a refusal into the server's own sentence", async () => {
    const response = new Response(JSON.stringify({ error: 'Wait a minute.' }), { status: 429 });
    const failure = await refusal(response);
    expect(failure).toBeInstanceOf(JoinFailure);
    expect(joinMessage(failure.problem!)).toBe('The voxroom server refused to let you join: Wait a minute.');
    const bare = await refusal(new Response('oops', { status: 502 }));
    expect(joinMessage(bare.problem!)).toContain('(HTTP 502)');
  });
});

describe('direct protocol', () => {
  it('parses attribute changes and whole text streams', () => {
    expect(parseDirectMessage('{"type":"attributes","attributes":{"lk.agent.state":"thinking"}}')).toEqual({
      type: 'attributes',
      attributes: { 'lk.agent.state': 'thinking' },
    });
    const text = {
      type: 'text',
      id: 'DS_1',
      topic: 'lk.transcription',
      sender: 'agent',
      attributes: { 'lk.segment_id': 'agent-1', 'lk.transcription_final': 'true' },
      text: 'Paris.',
    };
    expect(parseDirectMessage(JSON.stringify(text))).toEqual(text);
  });

  it('ignores anything malformed', () => {
    for (const data of [
      'not json',
      '[]',
      'null',
      '{"type":"attributes","attributes":{"a":1}}',
      '{"type":"text","id":"x","topic":"t","sender":"s","attributes":{}}',
      '{"type":"hello"}',
      new ArrayBuffer(4),
    ]) {
      expect(parseDirectMessage(data)).toBeUndefined();
    }
  });
});

describe('latency readout', () => {
  it('shows the voice-to-voice time and the stages that were measured', () => {
    const turn = parseMetrics(
      JSON.stringify({
        type: 'turn',
        interrupted: false,
        latency_ms: { endpoint: 301.4, stt: 210, llm_first_token: null, tts_first_audio: 41, voice_to_voice: 540.2 },
      }),
    );
    expect(turn).toEqual({
      interrupted: false,
      stages: { endpoint: 301.4, stt: 210, tts_first_audio: 41, voice_to_voice: 540.2 },
    });
    expect(formatLatency(turn!)).toBe("Last turn: 540 ms to the agent's first word (endpoint 301 · STT 210 · TTS 41 ms)");
  });

  it('says when a turn was interrupted or not measured', () => {
    const turn = parseMetrics('{"type":"turn","interrupted":true,"latency_ms":{}}');
    expect(formatLatency(turn!)).toBe('Last turn, interrupted');
  });

  it('ignores other messages', () => {
    expect(parseMetrics('{"type":"other","latency_ms":{}}')).toBeUndefined();
    expect(parseMetrics('{"type":"turn"}')).toBeUndefined();
    expect(parseMetrics('garbage')).toBeUndefined();
  });
});

describe('copilot answers', () => {
  const question = { 'voxroom.copilot.question': 'How would you find duplicates?' };

  it('accumulates each answer under its question and keeps the most recent ones', () => {
    const answers = new CopilotAnswers(2);
    answers.open('a', question);
    expect(answers.append('a', 'Use a ')).toBe(true);
    answers.append('a', 'hash set.');
    expect(answers.list()).toEqual([
      { id: 'a', question: 'How would you find duplicates?', text: 'Use a hash set.', done: false, status: undefined },
    ]);
    answers.close('a', { ...question, 'voxroom.copilot.status': 'complete' });
    expect(answers.list()[0]).toMatchObject({ done: true, status: 'complete' });
    answers.open('b', undefined);
    answers.append('b', 'O(n).');
    answers.open('c', {});
    answers.append('c', 'Yes.');
    expect(answers.list().map((a) => [a.id, a.question])).toEqual([
      ['b', ''],
      ['c', ''],
    ]);
    expect(answers.append('a', 'late')).toBe(false);
  });

  it('drops an answer the agent replaced, and shows its replacement', () => {
    const answers = new CopilotAnswers();
    answers.open('a', question);
    answers.append('a', 'Please share your resume.');
    answers.close('a', { 'voxroom.copilot.status': 'replaced' });
    answers.open('b', question);
    answers.append('b', 'I used a hash set.');
    answers.close('b', { 'voxroom.copilot.status': 'complete' });
    expect(answers.list().map((a) => [a.id, a.text])).toEqual([['b', 'I used a hash set.']]);
  });

  it('drops an answer withdrawn because the question went on, with or without its text', () => {
    const answers = new CopilotAnswers();
    answers.open('a', { 'voxroom.copilot.question': 'Where did you go to university?' });
    answers.append('a', 'I studied at');
    expect(answers.list().map((a) => a.id)).toEqual(['a']);
    answers.close('a', { 'voxroom.copilot.status': 'withdrawn' });
    answers.open('b', undefined);
    answers.close('b', { 'voxroom.copilot.status': 'withdrawn' });
    answers.open('c', question);
    answers.append('c', 'I studied computer science at Leeds.');
    expect(answers.list().map((a) => a.id)).toEqual(['c']);
  });

  it('shows an answer that failed before it said anything, not one still empty', () => {
    const answers = new CopilotAnswers();
    answers.open('a', question);
    expect(answers.list()).toEqual([]);
    answers.close('a', { 'voxroom.copilot.status': 'failed' });
    expect(answers.list()).toEqual([
      { id: 'a', question: 'How would you find duplicates?', text: '', done: true, status: 'failed' },
    ]);
  });
});

describe('microphone picker', () => {
  it('lists audio inputs, naming the ones the browser does not name', () => {
    const devices = [
      { kind: 'audioinput', deviceId: 'default', label: '' },
      { kind: 'videoinput', deviceId: 'cam', label: 'Camera' },
      { kind: 'audioinput', deviceId: 'usb', label: 'USB headset' },
      { kind: 'audioinput', deviceId: '', label: '' },
    ];
    expect(microphoneChoices(devices)).toEqual([
      { id: 'default', label: 'Microphone 1' },
      { id: 'usb', label: 'USB headset' },
    ]);
  });

  it('words getUserMedia errors by their name', () => {
    const named = (name: string) => Object.assign(new Error('x'), { name });
    expect(micProblemOf(named('NotAllowedError'))).toBe('denied');
    expect(micProblemOf(named('NotFoundError'))).toBe('not-found');
    expect(micProblemOf(named('NotReadableError'))).toBe('busy');
    expect(micProblemOf(named('TypeError'))).toBe('other');
    expect(micProblemOf('nope')).toBe('other');
  });
});

describe('remote level', () => {
  it('is the root mean square of the samples', () => {
    expect(rms(new Float32Array([]))).toBe(0);
    expect(rms(new Float32Array([0.5, -0.5, 0.5, -0.5]))).toBeCloseTo(0.5);
    expect(rms(new Float32Array(8))).toBe(0);
  });
});
