import { describe, expect, it } from 'vitest';

import { CHAT_TOPIC, chatText, chatTooLong, MAX_CHAT_CHARS } from '../src/chat';

describe('typed messages', () => {
  it("use LiveKit's chat topic", () => {
    expect(CHAT_TOPIC).toBe('lk.chat');
  });

  it('send the trimmed text, and nothing for a blank box', () => {
    expect(chatText('  What time is it?\n')).toBe('What time is it?');
    expect(chatText(' \n\t')).toBeUndefined();
  });

  it("are held to the agent's bound", () => {
    expect(chatTooLong('x'.repeat(MAX_CHAT_CHARS))).toBe(false);
    expect(chatTooLong('x'.repeat(MAX_CHAT_CHARS + 1))).toBe(true);
  });
});
