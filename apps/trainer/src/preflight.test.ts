import { usesNativeOps } from "@ulysses/native-ops";
import { describe, expect, it } from "vitest";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { availableMemory, type ReadText } from "@ulysses/measure";
import { checkMemory, estimateMemory } from "./preflight.js";

// the MLP and loss untiled: auto tiles (the defaults) stop their buffers growing with the sequence past 4 MiB per rank
// kernel ort: the account's terms below are those of ONNX Runtime's ops on any machine (the native ops' loss tile is checked apart)
const MODEL: TrainConfig = { ...DEFAULTS, layers: 2, hidden: 256, heads: 8, kvHeads: 8, batch: 1, sp: 2, tileMlp: 0, tileLoss: 0, kernel: "ort" };
const GiB = 2 ** 30;
const MiB = 2 ** 20;

/** The bytes of an estimate's exchange scratch term. */
function exchangeTerm(e: ReturnType<typeof estimateMemory>): number {
  const terms = e.terms.filter((t) => t.name.includes("exchange scratch"));
  expect(terms).toHaveLength(1);
  return terms[0]!.bytes;
}

/** A fake /proc and /sys: the given files exist, every other file is missing. */
function files(contents: Record<string, string>): ReadText {
  return (file) => contents[file] ?? null;
}

const meminfo = (availableKb: number) => `MemTotal:       24000000 kB\nMemFree:        20000000 kB\nMemAvailable:   ${availableKb} kB\n`;

describe("memory estimate", () => {
  it("grows linearly in the sequence length for a fixed model", () => {
    // pipelined Ulysses exchanges whole tensors: no term stops growing (chunked exchanges: the next test)
    const at = (seq: number) => estimateMemory({ ...MODEL, seq, ulyssesHeadGroups: 2 }).bytes;
    const step = at(2048) - at(1024);
    expect(step).toBeGreaterThan(0);
    for (const seq of [2048, 4096, 8192, 65536]) expect(at(2 * seq) - at(seq)).toBeCloseTo((step * seq) / 1024, -3);
  });

  it("counts Ulysses' exchange scratch in chunks: at most 4 MiB a send and a receive area per rank; pipelined Ulysses' whole", () => {
    // q, k, v of 256 floats a token each, sent and received, the other rank's half of each (a rank's own block is copied
    // straight across): 3 KiB a token per rank, 2 ranks; past 1365 tokens per rank, chunks of 4 MiB of whole tensors, half travels
    const scratch = (seq: number, ulyssesHeadGroups = 1) => exchangeTerm(estimateMemory({ ...MODEL, seq, ulyssesHeadGroups }));
    expect(scratch(1024)).toBe(2 * 512 * 3 * 1024);
    expect(scratch(2048)).toBe(2 * 1024 * 3 * 1024);
    expect(scratch(4096)).toBe(2 * 4 * MiB);
    expect(scratch(65536)).toBe(2 * 4 * MiB);
    expect(scratch(65536, 2)).toBe(2 * 32768 * 3 * 1024);
  });

  it("counts the backward's two phases, the loss and final norm's and one block's, as the larger of them, not their sum", () => {
    // SP 2, N = 4096: 2048 tokens per rank. One block's backward, MLP untiled: dy and the MLP's up, activation, their gradient and one
    // MLP-wide temporary, 256 + 3 x 1024 floats a token. The loss phase, untiled: logits, softmax and dLogits, 3 x vocab, and the final
    // norm's input, output and gradient, 3 x 256 + 2 floats a token.
    const workingSet = (vocab: number) => {
      const terms = estimateMemory({ ...MODEL, seq: 4096, vocab }).terms.filter((t) => t.name.startsWith("backward working set"));
      expect(terms).toHaveLength(1);
      expect(terms[0]!.name).toContain(`logits, softmax and their gradient [tokens, vocab ${vocab}]`);
      return terms[0]!.bytes;
    };
    expect(workingSet(256)).toBe(2 * 4 * 2048 * (256 + 3 * 1024)); // the block's is larger
    expect(workingSet(512)).toBe(2 * 4 * 2048 * (256 + 3 * 1024)); // still: the loss phase's is 2306 floats a token
    expect(workingSet(4096)).toBe(2 * 4 * 2048 * (3 * 4096 + 3 * 256 + 2)); // the loss phase's is larger
    // a tiled loss: the term names one loss tile (ONNX Runtime's ops: the logits and a second buffer for dLogits)
    const tiled = estimateMemory({ ...MODEL, seq: 4096, vocab: 256, tileLoss: 1024 }).terms.filter((t) => t.name.startsWith("backward working set"));
    expect(tiled.map((t) => t.name)).toEqual([expect.stringContaining("one loss tile: logits and dLogits of 1024 tokens x vocab 256")]);
    // vocab 32768 in tiles of 64 rows: the loss phase is the larger (logits and dLogits of one tile; the head weight gradient in
    // blocks of 4 MiB / (4 x 256) = 4096 columns, each [256, 4096] made from a copy of dLogits' columns [64, 4096]; the final
    // norm's 3 x 256 + 2 floats a token); with --no-memory-arena the collector frees the previous block before the next budget-sized
    // one is made, with the arenas V8 may still hold it
    const lossTerm = (memoryArena: boolean) =>
      estimateMemory({ ...MODEL, seq: 4096, vocab: 32768, tileLoss: 64, memoryArena }).terms.find((t) => t.name.startsWith("backward working set"))!;
    expect(lossTerm(false).bytes).toBe(2 * 4 * (2 * 64 * 32768 + (256 + 64) * 4096 + 770 * 2048));
    expect(lossTerm(false).name).toContain("one block of a tile's head weight gradient [hidden, 4096 of vocab 32768] and its dLogits columns");
    expect(lossTerm(true).bytes).toBe(2 * 4 * (2 * 64 * 32768 + 2 * (256 + 64) * 4096 + 770 * 2048));
    expect(lossTerm(true).name).toContain("two blocks of a tile's head weight gradient");
    // vocab 256 in tiles of 1024 rows: the whole [256, 256] gradient is one block, no dLogits copy
    const small = estimateMemory({ ...MODEL, seq: 4096, vocab: 256, tileLoss: 1024, memoryArena: false }).terms.find((t) =>
      t.name.startsWith("backward working set"),
    )!;
    expect(small.name).toContain("one block of a tile's head weight gradient [hidden, vocab]");
    // with the native ops (when the addon runs here) the cross-entropy writes dLogits over the logits: one [64, vocab] buffer
    // fewer (vocab 65536, where the loss phase stays the larger)
    if (usesNativeOps("auto")) {
      const loss = (kernel: "auto" | "ort") =>
        estimateMemory({ ...MODEL, kernel, seq: 4096, vocab: 65536, tileLoss: 64, memoryArena: false }).terms.find((t) =>
          t.name.startsWith("backward working set"),
        )!;
      expect(loss("auto").name).toContain("one loss tile: logits, overwritten by their gradient, of 64 tokens x vocab 65536");
      expect(loss("auto").bytes).toBe(loss("ort").bytes - 2 * 4 * 64 * 65536);
    }
  });

  it("breaks the estimate down and counts every rank", () => {
    const e = estimateMemory({ ...MODEL, seq: 4096 });
    expect(e.ranks).toBe(2);
    expect(e.tokensPerRank).toBe(2048);
    expect(e.terms.reduce((n, t) => n + t.bytes, 0)).toBe(e.bytes);
    for (const name of ["weights", "gradients", "AdamW", "saved activations", "attention", "exchange", "logits", "baseline"]) {
      expect(
        e.terms.some((t) => t.name.includes(name)),
        name,
      ).toBe(true);
    }
    expect(estimateMemory({ ...MODEL, seq: 4096, dp: 2 }).bytes).toBeGreaterThan(e.bytes);
  });

  it("counts V8's deferred collection per rank with the arenas only (V8's heap then grows 10x between full collections)", () => {
    const deferred = (config: TrainConfig) => estimateMemory(config).terms.filter((t) => t.name.startsWith("freed tensors awaiting V8's full collection"));
    for (const sp of [1, 2, 4]) {
      const arena = deferred({ ...MODEL, seq: 4096, sp, memoryArena: true });
      expect(arena).toHaveLength(1);
      expect(arena[0]!.bytes).toBe(sp * 40 * MiB);
      expect(deferred({ ...MODEL, seq: 4096, sp, memoryArena: false })).toHaveLength(0);
    }
  });

  it("is smaller with activation checkpointing and with ZeRO-1", () => {
    const base = estimateMemory({ ...MODEL, seq: 8192, layers: 8 }).bytes;
    expect(estimateMemory({ ...MODEL, seq: 8192, layers: 8, activationCheckpointing: true }).bytes).toBeLessThan(base);
    const big = { ...MODEL, seq: 128, hidden: 1024, heads: 16, kvHeads: 16, sp: 4 };
    expect(estimateMemory({ ...big, zero: 1 }).bytes).toBeLessThan(estimateMemory(big).bytes);
  });
});

describe("checkMemory", () => {
  it("refuses a run whose estimate exceeds the limit, naming both numbers and --skip-memory-check", () => {
    const config = { ...MODEL, seq: 4194304 };
    const estimate = estimateMemory(config).bytes;
    const read = files({ "/proc/meminfo": meminfo(8 * 1024 * 1024) });
    let message = "";
    try {
      checkMemory(config, { read, env: {} });
    } catch (error) {
      expect((error as Error).name).toBe("TrainerError");
      message = (error as Error).message;
    }
    expect(message).toContain(`${estimate} bytes`);
    expect(message).toContain(`${8 * GiB} bytes`);
    expect(message).toContain("8.00 GiB");
    expect(message).toContain("MemAvailable in /proc/meminfo");
    expect(message).toMatch(/saved activations .* GiB/);
    expect(message).toContain("--skip-memory-check");
  });

  it("takes the smallest of the cgroup limit, MemAvailable and ULYSSES_MEMORY_LIMIT", () => {
    const config = { ...MODEL, seq: 2048 };
    const estimate = estimateMemory(config).bytes;
    const read = files({ "/proc/meminfo": meminfo(64 * 1024 * 1024), "/sys/fs/cgroup/memory.max": `${Math.floor(estimate / 2)}\n` });
    expect(() => checkMemory(config, { read, env: {} })).toThrow(
      new RegExp(`${Math.floor(estimate / 2)} bytes\\) is available \\(cgroup limit /sys/fs/cgroup/memory.max\\)`),
    );
    const roomy = files({ "/proc/meminfo": meminfo(64 * 1024 * 1024) });
    expect(checkMemory(config, { read: roomy, env: {} })!.available.bytes).toBe(64 * GiB);
    expect(() => checkMemory(config, { read: roomy, env: { ULYSSES_MEMORY_LIMIT: "100M" } })).toThrow(
      /104857600 bytes\) is available \(ULYSSES_MEMORY_LIMIT\)/,
    );
    expect(() => checkMemory(config, { read: roomy, env: { ULYSSES_MEMORY_LIMIT: "lots" } })).toThrow(/ULYSSES_MEMORY_LIMIT='lots' is not a byte count/);
  });

  it("falls back to os.freemem() without /proc/meminfo, and checks nothing when skipped", () => {
    const config = { ...MODEL, seq: 4194304 };
    expect(availableMemory({ read: files({}), env: {}, freemem: () => 3 * GiB })).toEqual({ bytes: 3 * GiB, source: "os.freemem()" });
    expect(() => checkMemory(config, { read: files({}), env: {}, freemem: () => 3 * GiB })).toThrow(/is available \(os.freemem\(\)\)/);
    expect(checkMemory(config, { skip: true, read: files({}), env: {}, freemem: () => 1 })).toBeNull();
  });

  it("names an impossible model size instead of estimating it", () => {
    expect(() => checkMemory({ ...MODEL, layers: 1e8 }, { read: files({}), env: {} })).toThrow(
      /invalid model size: GPT config: layers 100000000 is above the limit/,
    );
  });
});
