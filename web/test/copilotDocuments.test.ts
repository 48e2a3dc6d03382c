import { describe, expect, it } from 'vitest';

import { SpeechSwitch } from '../src/copilot';
import {
  CopilotDocuments,
  documentProblem,
  type FileLike,
  isCopilot,
  MAX_DOCUMENT_BYTES,
  notCopilotMessage,
  parseReceipt,
  tooLongMessage,
} from '../src/copilotDocuments';

const resume: FileLike = { name: 'resume.md', size: 1307 };
const job: FileLike = { name: 'Job.PDF', size: 40_000 };
// What the copilot agent's attributes are once its session runs (agent/copilot/room.py).
const copilot = (warm: string) => ({
  'lk.agent.state': 'listening',
  'voxroom.copilot.speak': 'false',
  'voxroom.copilot.warm_pieces': warm,
  'voxroom.copilot.documents_fit': 'true',
});
const indexed = (name: string, pieces: number) => JSON.stringify({ name, status: 'indexed', pieces });
const reading = (warm: number, total: number) =>
  `Reading your documents into the model: ${warm} of ${total} pieces. ` +
  'Answers come meanwhile, a little slower.';

/** Chosen, sent and through, as the page does it. */
function sendAll(docs: CopilotDocuments<FileLike>): void {
  for (const [name, file] of docs.take()) docs.sent(name, file);
}

describe('documentProblem', () => {
  it('takes text, markdown and PDF files up to the agent limit', () => {
    expect(documentProblem(resume)).toBeUndefined();
    expect(documentProblem(job)).toBeUndefined();
    expect(documentProblem({ name: 'cv.txt', size: MAX_DOCUMENT_BYTES })).toBeUndefined();
  });

  it('says in a sentence why a file is refused', () => {
    expect(documentProblem({ name: 'cv.txt', size: MAX_DOCUMENT_BYTES + 1 })).toBe(
      'cv.txt is 201 kB; the copilot takes at most 200 kB. Shorten it, or save it as plain text.',
    );
    expect(documentProblem({ name: 'cv.docx', size: 10 })).toBe(
      'cv.docx is not a text, markdown or PDF file (.txt, .md or .pdf).',
    );
    expect(documentProblem({ name: 'cv.md', size: 0 })).toBe('cv.md is empty.');
  });
});

describe('parseReceipt', () => {
  it("reads the agent's receipts and nothing else", () => {
    expect(parseReceipt(indexed('resume', 9))).toEqual({
      name: 'resume',
      status: 'indexed',
      pieces: 9,
      error: '',
    });
    const refused = { name: 'resume', status: 'refused', pieces: 0, error: 'the PDF is encrypted' };
    expect(parseReceipt(JSON.stringify(refused))).toEqual(refused);
    expect(parseReceipt(JSON.stringify({ name: 'resume', status: 'indexed', pieces: -1 }))?.pieces).toBe(0);
    expect(parseReceipt(JSON.stringify({ name: 'resume', status: 'done' }))).toBeUndefined();
    expect(parseReceipt('{"status": "indexed"}')).toBeUndefined();
    expect(parseReceipt('not json')).toBeUndefined();
    expect(parseReceipt('null')).toBeUndefined();
  });
});

describe('CopilotDocuments', () => {
  it('waits for the copilot, sends each chosen file once, then reports the receipt', () => {
    const docs = new CopilotDocuments<FileLike>();
    expect(docs.status('resume')).toBe('');
    expect(docs.choose('resume', resume)).toBe(true);
    expect(docs.status('resume')).toBe('resume.md is sent to the copilot when it joins.');
    expect(docs.take()).toEqual([['resume', resume]]);
    expect(docs.take()).toEqual([]); // being sent: not again
    expect(docs.status('resume')).toBe('Sending resume.md.');
    expect(docs.readiness(copilot('0'))).toBe('Sending your documents to the copilot.');
    docs.sent('resume', resume);
    expect(docs.status('resume')).toBe('The copilot is reading resume.md.');
    expect(docs.readiness(copilot('0'))).toBe('The copilot is reading your documents.');
    expect(docs.receipt(indexed('resume', 9))).toBe(true);
    expect(docs.status('resume')).toBe('resume.md: read, 9 pieces.');
    expect(docs.totalPieces()).toBe(9);
  });

  it('counts the pieces the model has read against all the receipts', () => {
    const docs = new CopilotDocuments<FileLike>();
    docs.choose('resume', resume);
    sendAll(docs);
    docs.receipt(indexed('resume', 8));
    expect(docs.readiness(copilot('0'))).toBe(reading(0, 8));
    expect(docs.readiness(copilot('8'))).toBe('Ready: answers come at full speed.');
    docs.choose('job_description', job);
    sendAll(docs);
    docs.receipt(indexed('job_description', 12));
    expect(docs.readiness(copilot('8'))).toBe(reading(8, 20));
    expect(docs.readiness(copilot('20'))).toBe('Ready: answers come at full speed.');
    // More in the cache than we sent: an older, longer version; ours is not read yet.
    expect(docs.readiness(copilot('31'))).toBe(reading(0, 20));
  });

  it('says so when the documents are too long to be read into the model', () => {
    const docs = new CopilotDocuments<FileLike>();
    docs.choose('resume', resume);
    sendAll(docs);
    docs.receipt(indexed('resume', 80));
    const tooLong = { ...copilot('0'), 'voxroom.copilot.documents_fit': 'false' };
    expect(docs.readiness(tooLong)).toBe(tooLongMessage);
    expect(docs.readiness(copilot('80'))).toBe('Ready: answers come at full speed.');
  });

  it('says nothing about readiness until there is something to read', () => {
    const docs = new CopilotDocuments<FileLike>();
    expect(docs.readiness(undefined)).toBe('');
    expect(docs.readiness(copilot('0'))).toBe('');
    docs.choose('resume', resume);
    expect(docs.readiness(undefined)).toBe('');
    sendAll(docs);
    docs.receipt(indexed('resume', 0));
    expect(docs.status('resume')).toBe('resume.md has no text the copilot could read.');
    expect(docs.readiness(copilot('0'))).toBe('');
  });

  it('tells the voice assistant from a copilot', () => {
    const docs = new CopilotDocuments<FileLike>();
    expect(isCopilot(copilot('0'))).toBe(true);
    expect(isCopilot({ 'lk.agent.state': 'listening' })).toBe(false);
    expect(isCopilot(undefined)).toBe(false);
    expect(docs.readiness({ 'lk.agent.state': 'listening' })).toBe(notCopilotMessage);
    expect(docs.readiness({})).toBe(''); // an agent that has not started yet
  });

  it("shows the agent's refusal, and keeps the earlier version's pieces", () => {
    const docs = new CopilotDocuments<FileLike>();
    docs.choose('resume', resume);
    sendAll(docs);
    docs.receipt(indexed('resume', 9));
    const scan: FileLike = { name: 'scan.pdf', size: 5000 };
    docs.choose('resume', scan);
    sendAll(docs);
    docs.receipt(
      JSON.stringify({ name: 'resume', status: 'refused', pieces: 0, error: 'the PDF is encrypted' }),
    );
    expect(docs.status('resume')).toBe('The copilot refused scan.pdf: the PDF is encrypted.');
    expect(docs.totalPieces()).toBe(9); // the agent still holds resume.md
    expect(docs.readiness(copilot('9'))).toBe('Ready: answers come at full speed.');
  });

  it('refuses a file here without sending it', () => {
    const docs = new CopilotDocuments<FileLike>();
    const big: FileLike = { name: 'cv.pdf', size: 300_000 };
    expect(docs.choose('resume', big)).toBe(false);
    expect(docs.status('resume')).toBe(documentProblem(big));
    expect(docs.take()).toEqual([]);
    docs.resend();
    expect(docs.take()).toEqual([]);
  });

  it('reports a failed upload and a missing receipt as sentences', () => {
    const docs = new CopilotDocuments<FileLike>();
    docs.choose('resume', resume);
    docs.choose('job_description', job);
    const [[first, firstFile], [second, secondFile]] = docs.take() as [
      ['resume', FileLike],
      ['job_description', FileLike],
    ];
    docs.sent(first, firstFile, 'no agent is in the room.');
    expect(docs.status('resume')).toBe('resume.md could not be sent: no agent is in the room.');
    docs.sent(second, secondFile);
    expect(docs.unconfirmed(second, secondFile)).toBe(true);
    expect(docs.status('job_description')).toBe(
      'The copilot did not confirm Job.PDF within 30 s. Choose the file again to send it once ' +
        'more.',
    );
    expect(docs.unconfirmed(second, secondFile)).toBe(false);
    // A late receipt still counts.
    docs.receipt(indexed('job_description', 4));
    expect(docs.status('job_description')).toBe('Job.PDF: read, 4 pieces.');
  });

  it('ignores the end of an upload that a newer choice replaced', () => {
    const docs = new CopilotDocuments<FileLike>();
    docs.choose('resume', resume);
    docs.take();
    const newer: FileLike = { name: 'resume-v2.md', size: 900 };
    docs.choose('resume', newer);
    docs.sent('resume', resume);
    expect(docs.unconfirmed('resume', resume)).toBe(false);
    expect(docs.status('resume')).toBe('resume-v2.md is sent to the copilot when it joins.');
    // The older upload's receipt: its pieces are what the agent holds, not the newer file's verdict.
    docs.receipt(indexed('resume', 5));
    expect(docs.totalPieces()).toBe(5);
    expect(docs.take()).toEqual([['resume', newer]]);
  });

  it('sends everything again to the copilot of a new session', () => {
    const docs = new CopilotDocuments<FileLike>();
    docs.choose('resume', resume);
    sendAll(docs);
    docs.receipt(indexed('resume', 9));
    docs.resend();
    expect(docs.totalPieces()).toBe(0);
    expect(docs.take()).toEqual([['resume', resume]]);
  });

  it('ignores receipts for documents it did not send', () => {
    const docs = new CopilotDocuments<FileLike>();
    expect(docs.receipt(indexed('resume', 3))).toBe(false);
    expect(docs.receipt(indexed('notes', 3))).toBe(false);
    expect(docs.totalPieces()).toBe(0);
  });
});

describe('SpeechSwitch', () => {
  it("follows the agent's attribute, and the user's choice until the agent confirms it", () => {
    const speech = new SpeechSwitch();
    expect(speech.view(undefined)).toEqual({ checked: false, disabled: true, note: '' });
    expect(speech.view('false')).toEqual({ checked: false, disabled: false, note: '' });
    expect(JSON.parse(speech.ask(true))).toEqual({ speak: true });
    expect(speech.view('false').checked).toBe(true); // asked, not done yet
    expect(speech.view('true').checked).toBe(true);
    // Confirmed: from now on the attribute alone speaks.
    expect(speech.view('false').checked).toBe(false);
    speech.ask(false);
    speech.clear(); // sending failed
    expect(speech.view('true').checked).toBe(true);
  });

  it('is off for good where the worker has no voice', () => {
    const speech = new SpeechSwitch();
    speech.ask(true);
    expect(speech.view('unavailable')).toEqual({
      checked: false,
      disabled: true,
      note: 'This copilot cannot speak: its worker has no voice.',
    });
  });
});
