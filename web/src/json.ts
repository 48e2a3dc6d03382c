// Messages from the agent are JSON objects; anything else is ignored, never fatal.

/** The JSON object in `text`, or undefined for anything else (not JSON, an array, null). */
export function parseJsonObject(text: string): Record<string, unknown> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : undefined;
}
