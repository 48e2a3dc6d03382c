// The per-turn latency readout, from the `voxroom.metrics` topic: one JSON message per
// finished turn, `{"type": "turn", "interrupted": bool, "latency_ms": {stage: ms | null}}`
// (agent/protocol.py writes it; web/README.md documents it). No DOM here.

import { parseJsonObject } from './json';

export const METRICS_TOPIC = 'voxroom.metrics';

export interface TurnLatency {
  readonly interrupted: boolean;
  /** stage -> milliseconds; stages that were not measured are absent */
  readonly stages: Readonly<Record<string, number>>;
}

export function parseMetrics(text: string): TurnLatency | undefined {
  const body = parseJsonObject(text);
  if (!body) return undefined;
  const { type, interrupted, latency_ms: latency } = body;
  if (type !== 'turn' || typeof latency !== 'object' || latency === null) return undefined;
  const stages: Record<string, number> = {};
  for (const [stage, ms] of Object.entries(latency)) {
    if (typeof ms === 'number' && Number.isFinite(ms)) stages[stage] = ms;
  }
  return { interrupted: interrupted === true, stages };
}

/** Stages shown after the headline, in the order of a turn, with short names. */
const STAGES: readonly [string, string][] = [
  ['endpoint', 'endpoint'],
  ['stt', 'STT'],
  ['llm_first_token', 'LLM'],
  ['tts_first_audio', 'TTS'],
];

/** One line, e.g. "Last turn: 540 ms to the agent's first word (endpoint 300 · STT 210 ms)". */
export function formatLatency(turn: TurnLatency): string {
  const ms = (v: number) => `${Math.round(v)}`;
  const total = turn.stages.voice_to_voice;
  const head =
    total === undefined ? 'Last turn' : `Last turn: ${ms(total)} ms to the agent's first word`;
  const parts = STAGES.filter(([key]) => key in turn.stages).map(
    ([key, label]) => `${label} ${ms(turn.stages[key] ?? 0)}`,
  );
  const detail = parts.length ? ` (${parts.join(' · ')} ms)` : '';
  return `${head}${detail}${turn.interrupted ? ', interrupted' : ''}`;
}
