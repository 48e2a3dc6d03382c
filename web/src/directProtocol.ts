// The messages of direct mode's data channel (agent/transports/direct.py sends them): the agent's
// attribute changes and whole text streams, as a LiveKit room would carry them. No DOM here.

import { parseJsonObject } from './json';
import type { Attributes } from './transcript';

export type DirectMessage =
  | { readonly type: 'attributes'; readonly attributes: Attributes }
  | {
      readonly type: 'text';
      readonly id: string;
      readonly topic: string;
      readonly sender: string;
      readonly attributes: Attributes;
      readonly text: string;
    };

function isStringRecord(value: unknown): value is Record<string, string> {
  return (
    typeof value === 'object' &&
    value !== null &&
    Object.values(value).every((v) => typeof v === 'string')
  );
}

/** The message in `data`, or undefined for anything else (ignored, not fatal). */
export function parseDirectMessage(data: unknown): DirectMessage | undefined {
  if (typeof data !== 'string') return undefined;
  const m = parseJsonObject(data);
  if (!m) return undefined;
  if (m.type === 'attributes' && isStringRecord(m.attributes)) {
    return { type: 'attributes', attributes: m.attributes };
  }
  if (
    m.type === 'text' &&
    typeof m.id === 'string' &&
    typeof m.topic === 'string' &&
    typeof m.sender === 'string' &&
    typeof m.text === 'string' &&
    isStringRecord(m.attributes)
  ) {
    return {
      type: 'text',
      id: m.id,
      topic: m.topic,
      sender: m.sender,
      attributes: m.attributes,
      text: m.text,
    };
  }
  return undefined;
}
