/**
 * A documents state is untrusted data (a checkpoint's metadata): checkState
 * bounds every size it states by what the loader itself holds before
 * anything is loaded (at most the shuffle buffer's documents, each a byte
 * range of the corpus, a JSONL one no longer than the longest line read, no
 * two distinct ones overlapping), and restore loads each distinct document
 * once however often the buffer names it (a corpus smaller than the buffer
 * names its documents many times).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it, vi } from "vitest";
import { Rng } from "@ulysses/tensors";
import { DocumentData, type DocumentDataState } from "./document-data.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "document-state-"));
const texts = ["alpha beta gamma", "the second document, a little longer than the first", "third"];
const lines = texts.map((text) => JSON.stringify({ text }));
const corpus = path.join(dir, "small.jsonl");
fs.writeFileSync(corpus, `${lines.join("\n")}\n`);
/** Byte ranges of the three lines, counted here from the text written. */
const ranges = lines.map((line, i) => {
  const start = lines.slice(0, i).reduce((n, l) => n + l.length + 1, 0);
  return { file: 0, start, end: start + line.length, line: i + 1 };
});

const random = (rng: Rng) => () => rng.uniform();

function stateAfter(batches: number): { data: DocumentData; rng: Rng; state: DocumentDataState } {
  const data = new DocumentData({ path: corpus });
  const rng = new Rng(7, 1);
  for (let b = 0; b < batches; b++) data.batch(2, 16, random(rng));
  return { data, rng, state: data.state() };
}

describe("a documents state from a checkpoint", () => {
  it("of a corpus smaller than the buffer: each distinct document is loaded once, and the stream goes on as before", () => {
    const { data, rng, state } = stateAfter(3);
    // three documents fill a buffer of 64 by starting over: the buffer names them about 21 times each
    expect(state.buffer.length).toBe(63);
    const distinct = new Set([...state.buffer, ...(state.pending === null ? [] : [state.pending.ref])].map((r) => `${r.start}-${r.end}`));
    expect(distinct.size).toBe(3);
    const resumed = new DocumentData({ path: corpus });
    const load = vi.spyOn(resumed.source, "load");
    resumed.restore(state);
    expect(load).toHaveBeenCalledTimes(3);
    const resumedRng = new Rng(7, 1);
    resumedRng.setState(rng.getState());
    for (let b = 0; b < 4; b++) expect([...resumed.batch(2, 16, random(resumedRng)).tokens.data]).toEqual([...data.batch(2, 16, random(rng)).tokens.data]);
    data.close();
    resumed.close();
  });

  it("stating more than the loader holds is refused by key before any document is loaded", () => {
    const { data, state } = stateAfter(1);
    data.close();
    const [a, b, c] = ranges as [(typeof ranges)[0], (typeof ranges)[0], (typeof ranges)[0]];
    const cases: [Partial<DocumentDataState>, { shuffleBuffer?: number; maxLineBytes?: number }, RegExp][] = [
      [{ buffer: [a, b, c, a, b] }, { shuffleBuffer: 4 }, /data\.buffer holds 5 documents, more than the shuffle buffer's 4/],
      [
        { buffer: [a, b] },
        { maxLineBytes: 40 },
        new RegExp(`data\\.buffer\\[1\\] is a document of ${b.end - b.start} bytes, more than the longest line read \\(40 bytes\\)`),
      ],
      [{ buffer: [a, { ...b, start: b.start - 3 }] }, {}, /data\.buffer\[1\] .* overlaps data\.buffer\[0\]/],
      // a long range and, two documents later, one inside it: overlapping though not neighbours
      [{ buffer: [{ ...a, end: c.end }, b, c] }, {}, /overlaps data\.buffer\[0\]/],
      [{ buffer: [a, { ...c, end: c.end + 100 }] }, {}, /data\.buffer\[1\] .* is no byte range of the corpus \(1 files; that one has \d+ bytes\)/],
      [{ buffer: [{ ...a, file: 1 }] }, {}, /data\.buffer\[0\] .* is no byte range of the corpus/],
      [{ buffer: [a], pending: { ref: { ...b, start: b.end }, offset: 0, id: 0, position: 0 } }, {}, /data\.pending\.ref .* is no byte range/],
    ];
    for (const [edit, options, message] of cases) {
      const resumed = new DocumentData({ path: corpus, ...options });
      const load = vi.spyOn(resumed.source, "load");
      expect(() => resumed.restore({ ...state, ...edit }), message.source).toThrow(message);
      expect(load, message.source).not.toHaveBeenCalled();
      resumed.close();
    }
  });
});
