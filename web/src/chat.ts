// Typed messages: what the user types goes to the agent as a text stream on LiveKit's `lk.chat`
// topic, a user turn like a spoken one. The agent answers in voice and in the transcript, and
// shows the typed words as the user's turn (an `lk.transcription` of the user); it replies on
// `lk.chat` only to refuse a message (too long, too many). No DOM here.

export const CHAT_TOPIC = 'lk.chat';
/** The agent's bound (agent/transports/typed_input.py MAX_TYPED_CHARS): longer is refused. */
export const MAX_CHAT_CHARS = 2_000;

/** The text to send for what is in the box; undefined when there is nothing to send. */
export function chatText(typed: string): string | undefined {
  const text = typed.trim();
  return text ? text : undefined;
}

/** Whether the box's text may be sent as it is (the agent refuses longer messages). */
export function chatTooLong(text: string): boolean {
  return text.length > MAX_CHAT_CHARS;
}

export const chatTooLongMessage =
  `A message can be at most ${MAX_CHAT_CHARS} characters; shorten it and send it again.`;

export const chatNoAgentMessage = 'The agent is not ready yet: your message was not sent.';

export function chatFailedMessage(detail: string): string {
  return `Your message could not be sent${detail ? ` (${detail})` : ''}.`;
}
