// The candidate's documents for the interview copilot (agent/copilot/room.py reads them): which files
// the page takes, the agent's receipts on `voxroom.context.status`, and how much of them the
// model has read (the agent's attribute `voxroom.copilot.warm_pieces`). No DOM here: main.ts
// sends the files and renders the sentences this module words.

import { ATTR_AGENT_STATE } from './agentState';
import { parseJsonObject } from './json';
import type { Attributes } from './transcript';

export const CONTEXT_TOPIC = 'voxroom.context';
export const CONTEXT_STATUS_TOPIC = 'voxroom.context.status';
export const ATTR_CONTEXT_NAME = 'voxroom.context.name';
export const ATTR_WARM_PIECES = 'voxroom.copilot.warm_pieces';
/** "false": the documents are too long to be read once into the model's cache; each answer
 *  then reads the pieces nearest to its question, and warm_pieces stays 0. */
export const ATTR_DOCUMENTS_FIT = 'voxroom.copilot.documents_fit';
/** agent/copilot/context/index.py MAX_DOCUMENT_BYTES: the agent refuses anything larger. */
export const MAX_DOCUMENT_BYTES = 200_000;
export const DOCUMENT_SUFFIXES = ['.txt', '.md', '.pdf'] as const;
/** The agent acknowledges a document within seconds; silence this long means it never will. */
export const NO_RECEIPT_AFTER_S = 30;

export type DocumentName = 'resume' | 'job_description';

/** What the page needs of a chosen file (a DOM `File` has both). */
export interface FileLike {
  readonly name: string;
  readonly size: number;
}

/** The agent's receipt for one document (agent/copilot/room.py `_acknowledge`). */
export interface Receipt {
  readonly name: string;
  readonly status: 'indexed' | 'refused';
  readonly pieces: number;
  readonly error: string;
}

export function parseReceipt(text: string): Receipt | undefined {
  const body = parseJsonObject(text);
  if (!body) return undefined;
  const { name, status, pieces, error } = body;
  if (typeof name !== 'string' || (status !== 'indexed' && status !== 'refused')) return undefined;
  return {
    name,
    status,
    pieces: typeof pieces === 'number' && Number.isInteger(pieces) && pieces > 0 ? pieces : 0,
    error: typeof error === 'string' ? error : '',
  };
}

/** A reason to end one of our sentences: without its own full stop. */
function clause(reason: string): string {
  return reason.trim().replace(/\.+$/, '') || 'no reason given';
}

export function kilobytes(bytes: number): string {
  return `${Math.ceil(bytes / 1000)} kB`;
}

/** Why the page will not send `file`, as a sentence; undefined when it may. */
export function documentProblem(file: FileLike): string | undefined {
  const lower = file.name.toLowerCase();
  if (!DOCUMENT_SUFFIXES.some((suffix) => lower.endsWith(suffix))) {
    return `${file.name} is not a text, markdown or PDF file (.txt, .md or .pdf).`;
  }
  if (file.size === 0) return `${file.name} is empty.`;
  if (file.size > MAX_DOCUMENT_BYTES) {
    return (
      `${file.name} is ${kilobytes(file.size)}; the copilot takes at most ` +
      `${kilobytes(MAX_DOCUMENT_BYTES)}. Shorten it, or save it as plain text.`
    );
  }
  return undefined;
}

/** Whether the agent is a copilot: it sets this attribute when its session starts, and only
 *  then takes documents (a stream sent earlier has no reader and is lost). */
export function isCopilot(agent: Attributes | undefined): boolean {
  return agent !== undefined && ATTR_WARM_PIECES in agent;
}

/** An agent with a state but no copilot attributes is the voice assistant: the copilot sets
 *  both at once. */
function isVoiceAssistant(agent: Attributes | undefined): boolean {
  return agent !== undefined && ATTR_AGENT_STATE in agent && !isCopilot(agent);
}

export const tooLongMessage =
  'Your documents are too long for the model to keep in memory: each answer reads the parts ' +
  'nearest to its question, so answers come a little slower. Shorter documents make them fast.';

export const notCopilotMessage =
  'The agent in this room is the voice assistant, not a copilot. LiveKit starts the copilot ' +
  'only for the join that creates the room: leave, then join a new room with "Interview ' +
  'copilot" checked.';

type Stage =
  | 'unsuitable' // refused here: wrong type, empty or too large
  | 'waiting' // chosen; sent once a copilot is in the room
  | 'sending'
  | 'sent' // the agent has it; no receipt yet
  | 'indexed'
  | 'refused' // by the agent
  | 'failed' // the upload itself
  | 'unconfirmed'; // no receipt in time

interface Document<F> {
  file: F;
  stage: Stage;
  detail: string; // why it was refused or failed
  /** What the agent holds of this document: a refusal leaves an earlier version in place. */
  pieces: number;
}

export class CopilotDocuments<F extends FileLike> {
  private readonly docs = new Map<DocumentName, Document<F>>();

  /** The user picked `file`. Returns whether it will be sent (`status` says why not). */
  choose(name: DocumentName, file: F): boolean {
    const problem = documentProblem(file);
    const pieces = this.docs.get(name)?.pieces ?? 0; // an earlier version stays with the agent
    this.docs.set(name, {
      file,
      stage: problem ? 'unsuitable' : 'waiting',
      detail: problem ?? '',
      pieces,
    });
    return !problem;
  }

  /** A new session: its copilot holds nothing yet, so every document goes again. */
  resend(): void {
    for (const doc of this.docs.values()) {
      doc.pieces = 0;
      if (doc.stage !== 'unsuitable') doc.stage = 'waiting';
    }
  }

  /** Documents to send now, each marked as being sent. */
  take(): [DocumentName, F][] {
    const out: [DocumentName, F][] = [];
    for (const [name, doc] of this.docs) {
      if (doc.stage !== 'waiting') continue;
      doc.stage = 'sending';
      out.push([name, doc.file]);
    }
    return out;
  }

  /** The upload of `file` ended: `failure` is why it broke, undefined when it went through. */
  sent(name: DocumentName, file: F, failure?: string): void {
    const doc = this.current(name, file);
    if (!doc || doc.stage !== 'sending') return;
    doc.stage = failure === undefined ? 'sent' : 'failed';
    doc.detail = failure ?? '';
  }

  /** No receipt for `file` after NO_RECEIPT_AFTER_S. Returns whether that changed anything. */
  unconfirmed(name: DocumentName, file: F): boolean {
    const doc = this.current(name, file);
    if (!doc || doc.stage !== 'sent') return false;
    doc.stage = 'unconfirmed';
    return true;
  }

  /** A message on `voxroom.context.status`. Returns whether it concerned one of ours. */
  receipt(text: string): boolean {
    const receipt = parseReceipt(text);
    const doc = receipt && this.docs.get(receipt.name as DocumentName);
    if (!receipt || !doc) return false;
    if (receipt.status === 'indexed') doc.pieces = receipt.pieces;
    // Only an upload that waits for its receipt takes the verdict: a receipt for an earlier
    // version must not speak for a newer file that is not sent yet.
    if (doc.stage === 'sent' || doc.stage === 'unconfirmed') {
      doc.stage = receipt.status;
      doc.detail = receipt.error;
    }
    return true;
  }

  /** The line under a document's file input; empty when nothing was chosen. */
  status(name: DocumentName): string {
    const doc = this.docs.get(name);
    if (!doc) return '';
    const file = doc.file.name;
    switch (doc.stage) {
      case 'unsuitable':
        return doc.detail;
      case 'waiting':
        return `${file} is sent to the copilot when it joins.`;
      case 'sending':
        return `Sending ${file}.`;
      case 'sent':
        return `The copilot is reading ${file}.`;
      case 'indexed':
        return doc.pieces
          ? `${file}: read, ${doc.pieces} ${doc.pieces === 1 ? 'piece' : 'pieces'}.`
          : `${file} has no text the copilot could read.`;
      case 'refused':
        return `The copilot refused ${file}: ${clause(doc.detail)}.`;
      case 'failed':
        return `${file} could not be sent: ${clause(doc.detail)}.`;
      case 'unconfirmed':
        return (
          `The copilot did not confirm ${file} within ${NO_RECEIPT_AFTER_S} s. Choose the ` +
          'file again to send it once more.'
        );
    }
  }

  /** All pieces of the documents the agent holds. */
  totalPieces(): number {
    let total = 0;
    for (const doc of this.docs.values()) total += doc.pieces;
    return total;
  }

  /** How far the model has read the documents, from the attributes of the agent (undefined
   *  while none is there); empty while there is nothing to tell. */
  readiness(agent: Attributes | undefined): string {
    if (isVoiceAssistant(agent)) return notCopilotMessage;
    const warmPieces = agent?.[ATTR_WARM_PIECES];
    const stages = new Set([...this.docs.values()].map((doc) => doc.stage));
    if (stages.has('sending')) return 'Sending your documents to the copilot.';
    if (stages.has('sent')) return 'The copilot is reading your documents.';
    const total = this.totalPieces();
    const warm = Number(warmPieces);
    if (!total || warmPieces === undefined || !Number.isInteger(warm)) return '';
    if (agent?.[ATTR_DOCUMENTS_FIT] === 'false') return tooLongMessage;
    // The agent counts every piece in the model's cache. More than we sent is a longer,
    // older version of a document: what we sent is not read yet.
    if (warm === total) return 'Ready: answers come at full speed.';
    return (
      `Reading your documents into the model: ${warm < total ? warm : 0} of ${total} pieces. ` +
      'Answers come meanwhile, a little slower.'
    );
  }

  private current(name: DocumentName, file: F): Document<F> | undefined {
    const doc = this.docs.get(name);
    return doc?.file === file ? doc : undefined; // a newer choice replaced it meanwhile
  }
}
