/**
 * Memory bombs in crafted checkpoints (issue 46): a checkpoint is data anyone
 * may hand a user, so every size its header states is bounded by what the
 * run needs before anything is allocated. Each crafted file is resumed (or
 * loaded) in a fresh process (testing-fixtures/checkpoint-probe.ts) that
 * reads its peak RSS (maxRSS) and the clock around the call: every refusal
 * names the file and the key, exits 2, grows the peak by under 200 MB and
 * takes under 2 s. A watchdog in the probe kills a process that grows by
 * 1.5 GB, which is what an unbounded load does here.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { gptParamSpecs, readSafetensors, writeSafetensors, type GptConfig } from "@ulysses/model";
import { main } from "./cli.js";
import { captureMain } from "./testing-fixtures/capture.js";
import { spawnTrainer, tinyFlags } from "./testing-fixtures/cli.js";

const MB = 1e6;
const tiny = [...tinyFlags(), "--backend", "local", "--no-export", "--checkpoint-every", "0"];

const train = (args: string[]): Promise<{ code: number; stderr: string }> => captureMain(main, args);

let root: string;
/** A 2-step recall run and a 1-step JSONL run (copied, never modified). */
let recall: string;
let jsonl: string;
let corpus: string;
/** Byte ranges of the corpus's lines: line 1 is a 1 MB document, lines 2..81 are short ones. */
const lines: { start: number; end: number; line: number }[] = [];

beforeAll(async () => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "checkpoint-bombs-"));
  corpus = path.join(root, "corpus.jsonl");
  const texts = [JSON.stringify({ text: "x".repeat(MB) }), ...Array.from({ length: 80 }, (_, i) => JSON.stringify({ text: `document ${i} says hello` }))];
  let at = 0;
  texts.forEach((text, i) => {
    lines.push({ start: at, end: at + text.length, line: i + 1 });
    at += text.length + 1;
  });
  fs.writeFileSync(corpus, `${texts.join("\n")}\n`);
  recall = path.join(root, "recall");
  jsonl = path.join(root, "jsonl");
  const a = await train([...tiny, "--steps", "2", "--out", recall]);
  expect(a.code, a.stderr).toBe(0);
  const b = await train([...tiny, "--steps", "1", "--task", "text", "--data", corpus, "--out", jsonl]);
  expect(b.code, b.stderr).toBe(0);
}, 60_000);

afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

/** A copy of run `base` whose checkpoint's metadata `edit` rewrites. */
function crafted(name: string, base: string, edit: (metadata: Record<string, string>) => Record<string, string>): string {
  const dir = path.join(root, name);
  fs.cpSync(base, dir, { recursive: true });
  const file = path.join(dir, "checkpoint.safetensors");
  const { tensors, metadata } = readSafetensors(file);
  writeSafetensors(file, tensors, edit({ ...metadata }));
  return dir;
}

/** Rewrites one JSON metadata value of the copy. */
function craftedJson(name: string, base: string, key: string, edit: (value: Record<string, unknown>) => unknown): string {
  return crafted(name, base, (m) => ({ ...m, [key]: JSON.stringify(edit(JSON.parse(m[key]!) as Record<string, unknown>)) }));
}

/** The same file with its JSON header padded with spaces to `bytes` (safetensors allows trailing spaces). */
function paddedHeader(name: string, bytes: number): string {
  const dir = path.join(root, name);
  fs.cpSync(recall, dir, { recursive: true });
  const file = path.join(dir, "checkpoint.safetensors");
  const all = fs.readFileSync(file);
  const length = Number(all.readBigUInt64LE(0));
  const out = Buffer.alloc(8 + bytes + (all.length - 8 - length), 0x20);
  out.writeBigUInt64LE(BigInt(bytes), 0);
  all.copy(out, 8, 8, 8 + length);
  all.copy(out, 8 + bytes, 8 + length);
  fs.writeFileSync(file, out);
  return dir;
}

/** A sparse checkpoint of a GPT with hidden `hidden` (its float32 weights all zeros, about 12 x hidden^2 x 4 bytes a layer). */
function sparseModel(name: string, hidden: number): string {
  const config: GptConfig = { vocab: 16, hidden, heads: 2, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 4, maxSeq: 24, tiedHead: true };
  const header: Record<string, unknown> = {
    __metadata__: { format: "ulysses-ts-checkpoint/1", step: "1", config: JSON.stringify(config) },
  };
  let at = 0;
  for (const spec of gptParamSpecs(config)) {
    const bytes = 4 * spec.shape.reduce((a, b) => a * b, 1);
    header[spec.name] = { dtype: "F32", shape: spec.shape, data_offsets: [at, at + bytes] };
    at += bytes;
  }
  const json = Buffer.from(JSON.stringify(header));
  const file = path.join(root, `${name}.safetensors`);
  const head = Buffer.alloc(8);
  head.writeBigUInt64LE(BigInt(json.length));
  fs.writeFileSync(file, Buffer.concat([head, json]));
  fs.truncateSync(file, 8 + json.length + at);
  return file;
}

interface Probe {
  code: number;
  growthBytes: number;
  ms: number;
  stderr: string;
}

async function probe(args: string[]): Promise<Probe> {
  const result = await spawnTrainer(args, { script: "src/testing-fixtures/checkpoint-probe.ts" });
  const line = result.stdout.split("\n").find((l) => l.startsWith("PROBE "));
  // no report: the watchdog killed it (1.5 GB or 30 s), or it crashed
  if (line === undefined)
    return { code: result.code ?? -1, growthBytes: Number.NaN, ms: Number.NaN, stderr: `no report (signal ${result.signal}): ${result.stderr.slice(-2000)}` };
  return JSON.parse(line.slice(6)) as Probe;
}

interface Case {
  name: string;
  args: () => string[];
  message: RegExp;
}

const checkpointOf = (dir: string) => path.join(dir, "checkpoint.safetensors").replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

describe("crafted checkpoints are refused before anything large is allocated", () => {
  it("every refusal names the file and the key, exits 2, grows the peak RSS by under 200 MB and takes under 2 s", async () => {
    const big = lines[0]!;
    const cases: Case[] = [];
    // the message names the file ("checkpoint 'FILE': ...", or "'FILE': ..." for the safetensors layer) and then the key
    const cli = (name: string, dir: string, extra: string[], key: string) =>
      cases.push({ name, args: () => ["cli", "--resume", dir, "--backend", "local", ...extra], message: new RegExp(`'${checkpointOf(dir)}': .*${key}`) });
    const text = ["--data", corpus];
    // (a) the shuffle buffer repeats the 1 MB line 1000 times
    cli(
      "a-repeated-line",
      craftedJson("a", jsonl, "data", (d) => ({ ...d, buffer: Array.from({ length: 1000 }, () => ({ file: 0, ...big })) })),
      text,
      "data\\.buffer holds 1000 documents, more than the shuffle buffer's 64",
    );
    // 65 distinct short documents: one more than the buffer ever holds
    cli(
      "buffer-65",
      craftedJson("b65", jsonl, "data", (d) => ({ ...d, buffer: lines.slice(1, 66).map((l) => ({ file: 0, ...l })) })),
      text,
      "data\\.buffer holds 65 documents",
    );
    // 64 overlapping ranges of the 1 MB line (each nearly 1 MB)
    cli(
      "overlapping",
      craftedJson("ov", jsonl, "data", (d) => ({
        ...d,
        buffer: Array.from({ length: 64 }, (_, i) => ({ file: 0, start: big.start + i, end: big.end, line: 1 })),
      })),
      text,
      "data\\.buffer\\[\\d+\\] .* overlaps data\\.buffer\\[\\d+\\]",
    );
    // the pending document beyond the corpus file
    cli(
      "pending-outside",
      craftedJson("po", jsonl, "data", (d) => ({ ...d, pending: { ref: { file: 0, start: 0, end: 5 * MB, line: 1 }, offset: 0, id: 0, position: 0 } })),
      text,
      "data\\.pending\\.ref .* is no byte range of the corpus",
    );
    // a data state of 2 MB (30,000 references to a short document)
    cli(
      "data-2mb",
      craftedJson("d2", jsonl, "data", (d) => ({ ...d, buffer: Array.from({ length: 30_000 }, () => ({ file: 0, ...lines[1]! })) })),
      text,
      "metadata 'data' holds \\d+ characters, more than the 1048576",
    );
    // (b) maxSeq at its limit, exported at the end of the run
    cli(
      "b-maxseq",
      craftedJson("ms", recall, "config", (c) => ({ ...c, maxSeq: 1 << 24 })),
      ["--export"],
      "config\\.maxSeq 16777216 would make the ONNX export's RoPE tables",
    );
    // a 50 MB JSON header (spaces after the JSON)
    cli("header-50mb", paddedHeader("hd", 50 * MB), [], "safetensors header length 50000000 is above the limit of 16777216 bytes");
    // metadata strings far beyond what a trainer writes
    cli(
      "settings-100k",
      craftedJson("st", recall, "settings", (s) => ({ ...s, note: "x".repeat(100_000) })),
      [],
      "metadata 'settings' holds \\d+ characters",
    );
    cli(
      "rng-10k",
      craftedJson("rn", recall, "rng", (r) => ({ ...r, pad: "x".repeat(10_000) })),
      [],
      "metadata 'rng' holds \\d+ characters",
    );
    cli(
      "config-10k",
      craftedJson("cf", recall, "config", (c) => ({ ...c, pad: "x".repeat(10_000) })),
      [],
      "metadata 'config' holds \\d+ characters",
    );
    cli(
      "unknown-key",
      crafted("uk", recall, (m) => ({ ...m, extra: "x".repeat(10_000) })),
      [],
      "metadata 'extra' holds 10000 characters",
    );
    // a 400 MB model (a sparse file) that is not the model the ranks build (a file replaced after the CLI checked it): its tensors are never read
    const sparse = sparseModel("sparse", 2048);
    cases.push({
      name: "other-model",
      args: () => ["rank", sparse],
      message: new RegExp(`checkpoint '${sparse.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}': config\\.hidden 2048`),
    });

    const results: { name: string; probe: Probe }[] = [];
    for (let i = 0; i < cases.length; i += 2) {
      const pair = cases.slice(i, i + 2);
      const probes = await Promise.all(pair.map((c) => probe(c.args())));
      pair.forEach((c, j) => results.push({ name: c.name, probe: probes[j]! }));
    }
    const refused = results.filter(({ name, probe: p }) => {
      const c = cases.find((k) => k.name === name)!;
      return p.code === 2 && c.message.test(p.stderr) && p.growthBytes < 200 * MB && p.ms < 2000;
    });
    console.log(
      `crafted checkpoints: ${cases.length} tried, ${refused.length} refused within 200 MB and 2 s\n` +
        results.map(({ name, probe: p }) => `  ${name}: exit ${p.code}, peak RSS +${(p.growthBytes / MB).toFixed(1)} MB, ${p.ms.toFixed(0)} ms`).join("\n"),
    );
    for (const { name, probe: p } of results) {
      const c = cases.find((k) => k.name === name)!;
      expect(p.code, `${name}: ${p.stderr}`).toBe(2);
      expect(p.stderr, name).toMatch(c.message);
      expect(p.growthBytes, name).toBeLessThan(200 * MB);
      expect(p.ms, name).toBeLessThan(2000);
    }
    expect(refused.length).toBe(cases.length);
  }, 180_000);

  it("the bounds leave honest checkpoints alone: a JSONL run whose buffer holds the 1 MB line, and a model exported at a shorter --seq", async () => {
    const text = path.join(root, "honest-jsonl");
    fs.cpSync(jsonl, text, { recursive: true });
    const state = JSON.parse(readSafetensors(path.join(text, "checkpoint.safetensors")).metadata.data!) as { buffer: { start: number; end: number }[] };
    expect(state.buffer.some((ref) => ref.end - ref.start > MB)).toBe(true);
    const resumed = await train(["--resume", text, "--backend", "local", "--data", corpus, "--steps", "2"]);
    expect(resumed.code, resumed.stderr).toBe(0);
    const shorter = path.join(root, "honest-recall");
    fs.cpSync(recall, shorter, { recursive: true });
    const exported = await train(["--resume", shorter, "--backend", "local", "--seq", "20", "--steps", "3", "--export"]);
    expect(exported.code, exported.stderr).toBe(0);
    expect(fs.existsSync(path.join(shorter, "model.onnx"))).toBe(true);
  }, 60_000);
});
