// What the voxroom server says about itself (GET /api/config): how to connect, and whether
// this device may join as it is, needs an access code, or cannot join. No DOM here.

export type Mode = 'livekit' | 'direct';
export type Access = 'open' | 'code' | 'closed';

export interface ServerConfig {
  readonly mode: Mode;
  readonly access: Access;
}

const MODES: readonly string[] = ['livekit', 'direct'];
const ACCESS: readonly string[] = ['open', 'code', 'closed'];

export function parseConfig(body: unknown): ServerConfig | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const { mode, access } = body as Record<string, unknown>;
  if (typeof mode !== 'string' || !MODES.includes(mode)) return undefined;
  if (typeof access !== 'string' || !ACCESS.includes(access)) return undefined;
  return { mode: mode as Mode, access: access as Access };
}

/**
 * The access code from a link like `http://host:8080/#code=XYZ`. It travels in the fragment
 * so that it never reaches a server log; the page removes it from the address bar.
 */
export function accessCodeFromHash(hash: string): string {
  return new URLSearchParams(hash.replace(/^#/, '')).get('code') ?? '';
}
