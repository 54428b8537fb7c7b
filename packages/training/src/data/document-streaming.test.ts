import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

// A ~50 MB JSONL corpus is checked whole and packed through one full epoch in
// a child process started with a 32 MB old-space cap. V8 lets one large
// string grow past that cap, so the child also samples its heap after every
// batch (it must stay under 32 MiB: a string of the corpus would not), and
// reports the largest buffer the readers held, which must stay at the chunk
// size or the longest line (Buffers live outside the heap).
const here = path.dirname(fileURLToPath(import.meta.url));
const PROBE = `
const { DocumentData } = await import(${JSON.stringify(pathToFileURL(path.join(here, "document-data.ts")).href)});
const file = process.argv.at(-1);
const options = { path: file, chunkBytes: 1 << 16, shuffleBuffer: 32 };
const check = DocumentData.check(options, Infinity);
const data = new DocumentData(options);
let seed = 1;
const random = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
let batches = 0, documents = 0, peakHeap = 0;
while (data.state().epoch === 0) {
  documents += data.batch(8, 1024, random).stats.documents;
  batches++;
  peakHeap = Math.max(peakHeap, process.memoryUsage().heapUsed);
}
console.log(JSON.stringify({ check, batches, documents, largest: data.largestHeldBytes, peakHeap }));
`;

describe("streaming a corpus larger than the memory cap", () => {
  it("checks and packs a 50 MB JSONL corpus under a 32 MB heap, holding at most a chunk or a line", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "streaming-"));
    const file = path.join(dir, "big.jsonl");
    const fd = fs.openSync(file, "w");
    let lines = 0;
    let longest = 0;
    let seed = 7;
    for (let written = 0; written < 50e6; ) {
      const block: string[] = [];
      for (let i = 0; i < 100; i++) {
        seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
        const line = `${JSON.stringify({ text: `document ${lines} `.padEnd(1000 + (seed % 9000), "abcdefgh ".charAt(seed % 9)) })}\n`;
        longest = Math.max(longest, line.length);
        block.push(line);
        lines++;
      }
      const text = block.join("");
      fs.writeSync(fd, text);
      written += text.length;
    }
    fs.closeSync(fd);
    const size = fs.statSync(file).size;
    expect(size).toBeGreaterThan(50e6);
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--max-old-space-size=32", "--conditions=@ulysses/source", "--import", "tsx", "--input-type=module", "-e", PROBE, file],
      { cwd: path.resolve(here, "../.."), env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" }, maxBuffer: 1 << 20 },
    );
    const result = JSON.parse(stdout.trim().split("\n").at(-1)!);
    expect(result.check).toMatchObject({ documents: lines, bytes: size, complete: true });
    // one epoch of packing saw every document at least once (a continued one counts once per batch)
    expect(result.documents).toBeGreaterThanOrEqual(lines);
    // and packed every byte of text but the JSON around it and the 32 documents left in the shuffle buffer
    expect(result.batches * 8 * 1024).toBeGreaterThan(size - 32 * longest - 12 * lines);
    // the largest buffer: the 64 KiB chunk (or one line), never a sizeable part of the corpus
    expect(result.largest).toBeLessThanOrEqual(Math.max(1 << 16, longest));
    expect(result.peakHeap).toBeLessThan(32 * 2 ** 20);
    fs.rmSync(dir, { recursive: true });
  }, 60_000);
});
