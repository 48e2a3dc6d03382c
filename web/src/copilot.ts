// The copilot panel's answers, from text streams on the `voxroom.copilot` topic (agent/copilot/room.py
// writes them): one stream per answer, its chunks deltas of the answer's text; the attributes
// carry the question it answers, and the close its status. And its "Read answers aloud" switch
// (agent/copilot/voice.py). No DOM here.

import type { Attributes } from './transcript';

export const COPILOT_TOPIC = 'voxroom.copilot';
/** The track `voxroom bridge` publishes the meeting's audio on; the copilot listens to it. */
export const MEETING_TRACK = 'meeting-audio';
/** A bridge's attribute, from its token: the candidate whose copilot listens to it. */
export const ATTR_BRIDGE_CANDIDATE = 'voxroom.bridge.candidate';
export const ATTR_QUESTION = 'voxroom.copilot.question';
export const ATTR_STATUS = 'voxroom.copilot.status';
export const COPILOT_CONTROL_TOPIC = 'voxroom.copilot.control';
/** The agent's attribute: "true", "false", or "unavailable" (its worker has no TTS). */
export const ATTR_SPEAK = 'voxroom.copilot.speak';

/** How an answer ended: "complete", "failed", "cancelled", "replaced" or "withdrawn";
 *  undefined while it streams. */
export type AnswerStatus = string | undefined;

export interface CopilotAnswer {
  readonly id: string;
  readonly question: string;
  readonly text: string;
  readonly done: boolean;
  readonly status: AnswerStatus;
}

interface Answer {
  question: string;
  text: string;
  done: boolean;
  status: AnswerStatus;
}

const HIDDEN = new Set(['replaced', 'withdrawn']);

export class CopilotAnswers {
  private readonly answers = new Map<string, Answer>();

  constructor(private readonly keep = 20) {}

  open(streamId: string, attributes: Attributes | undefined): void {
    const question = attributes?.[ATTR_QUESTION] ?? '';
    this.answers.set(streamId, { question, text: '', done: false, status: undefined });
    // the oldest answers go once there are more than the panel keeps
    for (const id of this.answers.keys()) {
      if (this.answers.size <= this.keep) break;
      this.answers.delete(id);
    }
  }

  /** Returns whether the panel changed. */
  append(streamId: string, delta: string): boolean {
    const answer = this.answers.get(streamId);
    if (!answer || !delta) return false;
    answer.text += delta;
    return true;
  }

  close(streamId: string, attributes: Attributes | undefined): boolean {
    const answer = this.answers.get(streamId);
    if (!answer) return false;
    answer.done = true;
    answer.status = attributes?.[ATTR_STATUS];
    return true;
  }

  /** Answers with text, and those that ended without any (a failure is worth showing); not
   *  one the agent replaced (its guard found it off the candidate's voice or documents, and
   *  sent a new answer to the same question), nor one it withdrew (shown before the question
   *  ended, and the interviewer went on: the whole question's answer follows). */
  list(): CopilotAnswer[] {
    return [...this.answers]
      .filter(([, a]) => !HIDDEN.has(a.status ?? ''))
      .filter(([, a]) => a.text.trim() || (a.done && a.status && a.status !== 'complete'))
      .map(([id, a]) => ({ id, ...a, text: a.text.trim() }));
  }

  clear(): void {
    this.answers.clear();
  }
}

export interface SpeechView {
  readonly checked: boolean;
  readonly disabled: boolean;
  /** Why it is off for good; empty otherwise. */
  readonly note: string;
}

/** The "Read answers aloud" switch: what the user asked for until the agent's `speak`
 *  attribute says it is done, then the attribute. */
export class SpeechSwitch {
  private asked: boolean | undefined;

  /** The user flipped the switch: the message for `voxroom.copilot.control`. */
  ask(on: boolean): string {
    this.asked = on;
    return JSON.stringify({ speak: on });
  }

  /** `speak` is the agent's attribute, undefined while no copilot is there. */
  view(speak: string | undefined): SpeechView {
    if (speak === 'unavailable') {
      this.asked = undefined;
      return { checked: false, disabled: true, note: 'This copilot cannot speak: its worker has no voice.' };
    }
    if (speak === undefined) return { checked: this.asked ?? false, disabled: true, note: '' };
    const on = speak === 'true';
    if (this.asked === on) this.asked = undefined; // the agent did it
    return { checked: this.asked ?? on, disabled: false, note: '' };
  }

  clear(): void {
    this.asked = undefined;
  }
}
