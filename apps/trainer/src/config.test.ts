import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { helpText, parseArgs, resumeSettings } from "./args.js";
import { checkpointSettings, DEFAULTS, gptConfigOf, tileRowsOf, type TrainConfig } from "./config.js";
import { headGroupsOf } from "./plan.js";
import { validateConfig } from "./validate.js";

function parse(argv: string[]): TrainConfig {
  const result = parseArgs(argv);
  if (result.help || result.version) throw new Error("unexpected --help or --version");
  return result.config;
}

describe("argument parsing", () => {
  it("reads flags in both spellings, switches and negations", () => {
    const c = parse(["--sp", "4", "--kv-heads=2", "--activation-checkpointing", "--no-export", "--lr", "1e-3", "--attention", "allgather"]);
    expect(c.sp).toBe(4);
    expect(c.kvHeads).toBe(2);
    expect(c.activationCheckpointing).toBe(true);
    expect(c.export).toBe(false);
    expect(c.lr).toBe(1e-3);
    expect(c.attention).toBe("allgather");
    expect(c.layers).toBe(DEFAULTS.layers);
  });

  it("takes a config file with the same keys; command-line flags win; --data implies the text task", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cfg-"));
    const file = path.join(dir, "run.json");
    fs.writeFileSync(file, JSON.stringify({ sp: 4, "kv-heads": 1, steps: 7, data: "/tmp/x.txt" }));
    const c = parse(["--config", file, "--steps", "9"]);
    expect([c.sp, c.kvHeads, c.steps, c.data, c.task]).toEqual([4, 1, 9, "/tmp/x.txt", "text"]);
    fs.writeFileSync(file, JSON.stringify({ spp: 4 }));
    expect(() => parse(["--config", file])).toThrow(/run.json.*unknown setting 'spp'/);
  });

  it("rejects unknown flags, missing values and non-numbers with the offending text", () => {
    expect(() => parse(["--bogus", "1"])).toThrow(/unknown setting 'bogus'/);
    expect(() => parse(["--sp"])).toThrow(/--sp needs a value/);
    expect(() => parse(["--sp", "two"])).toThrow(/--sp needs a number, got 'two'/);
    expect(parseArgs(["--sp", "2", "--help"])).toEqual({ help: true });
    expect(parseArgs(["--sp", "2", "-V"])).toEqual({ help: false, version: true });
    expect(parseArgs(["--version"])).toEqual({ help: false, version: true });
    expect(helpText()).toMatch(/143 stopped by SIGTERM/);
    expect(helpText()).toMatch(/--kv-heads <n>/);
  });
});

describe("validation before any rank starts", () => {
  const problems = (overrides: Partial<TrainConfig>, env: NodeJS.ProcessEnv = {}) => {
    try {
      validateConfig({ ...DEFAULTS, ...overrides }, env);
      return "";
    } catch (error) {
      return (error as Error).message;
    }
  };

  it("accepts the defaults", () => expect(problems({})).toBe(""));
  it("names heads vs sp, seq, backend and rank-count problems", () => {
    expect(problems({ sp: 8, heads: 4, hidden: 64 })).toMatch(/--heads 4 is smaller than --sp 8/);
    expect(problems({ seq: 3, sp: 1 })).toMatch(/--seq 3 is too short \(needs at least 4: a quarter of facts and a quarter of queries\)/);
    expect(problems({ keys: 8, values: 8, vocab: 72 })).toMatch(/--vocab 72 is too small for 8 keys x 8 values \(needs at least 73/);
    expect(problems({ values: 1 })).toMatch(/--values must be at least 2/);
    expect(problems({ keys: 0 })).toMatch(/--keys must be a positive integer, got 0/);
    expect(problems({ task: "text", data: "x", vocab: 300 })).toMatch(
      /--vocab 300 is for the recall task; --task text is byte-level \(vocab 256\): drop --vocab/,
    );
    expect(problems({ sp: 4, seq: 3, task: "text", data: "x" })).toMatch(/--seq 3 is too short for --sp 4/);
    expect(problems({ task: "text", data: "/nonexistent/corpus.txt" })).toMatch(/--data '\/nonexistent\/corpus.txt': no such file or directory \(ENOENT\)/);
    expect(problems({ backend: "nccl" })).toMatch(/unknown backend 'nccl'/);
    expect(problems({ backend: "mpi", sp: 2, dp: 2 }, { OMPI_COMM_WORLD_SIZE: "2" })).toMatch(/--sp 2 x --dp 2 = 4 ranks, but mpirun started 2/);
    expect(problems({ heads: 4, kvHeads: 3 })).toMatch(/--heads 4 is not divisible by --kv-heads 3/);
    expect(problems({ hidden: 60, heads: 4 })).toMatch(/head dimension hidden\/heads = 60\/4 = 15 must be even/);
    expect(problems({ steps: -2, batch: 1.5 })).toMatch(
      /--batch must be a positive integer, got 1.5[\s\S]*--steps must be 0 \(export the model as loaded\) or a positive integer, got -2/,
    );
    expect(problems({ task: "text" })).toMatch(/--task text needs --data/);
  });

  it("takes --zero 0 to 3 and --shared-weights (threads or local, ZeRO 1 or 2) and names what is off", () => {
    expect(parse(["--zero", "2", "--shared-weights"])).toMatchObject({ zero: 2, sharedWeights: true });
    expect(parse(["--zero", "3"])).toMatchObject({ zero: 3 });
    expect(problems({ zero: 3 })).toBe("");
    expect(parse([])).toMatchObject({ zero: 0, sharedWeights: false });
    expect(problems({ zero: 2, sharedWeights: true })).toBe("");
    expect(problems({ zero: 1, sharedWeights: true, backend: "local" })).toBe("");
    expect(problems({ zero: 4 })).toMatch(/--zero must be 0, 1, 2, 3 \(the ZeRO stage\), got 4/);
    expect(problems({ zero: 1.5 })).toMatch(/--zero must be 0, 1, 2, 3 \(the ZeRO stage\), got 1.5/);
    expect(problems({ sharedWeights: true })).toMatch(
      /--shared-weights needs --zero 1 or 2: each rank updates its slice of the one whole copy in place, got --zero 0/,
    );
    expect(problems({ sharedWeights: true, zero: 3 })).toMatch(/got --zero 3 \(which shards the weights instead: one or the other\)/);
    expect(problems({ sharedWeights: true, zero: 1, backend: "mpi" }, { OMPI_COMM_WORLD_SIZE: "2" })).toMatch(
      /--shared-weights needs the threads or local backend \(ranks of one process\), got --backend mpi/,
    );
  });

  it("takes --precision fp32 or bf16 (ZeRO-2's slices over more than one rank) and names a bad value", () => {
    expect(parse([])).toMatchObject({ precision: "fp32" });
    expect(parse(["--zero", "2", "--precision", "bf16"])).toMatchObject({ zero: 2, precision: "bf16" });
    expect(problems({ zero: 2, precision: "bf16" })).toBe("");
    expect(problems({ zero: 3, precision: "bf16" })).toBe("");
    expect(problems({ zero: 2, precision: "fp16" as "bf16" })).toMatch(/--precision must be fp32 or bf16, got 'fp16'/);
    expect(problems({ zero: 1, precision: "bf16" })).toMatch(
      /--precision bf16 stores ZeRO-2's gradient slices in bf16: it needs --zero 2 or 3 over more than one rank \(sp x dp > 1\), got --zero 1 over 2/,
    );
    expect(problems({ zero: 2, sp: 1, precision: "bf16" })).toMatch(/got --zero 2 over 1/);
  });

  it("takes --tile-mlp and --tile-loss as rows per tile (0: off) or auto and names a bad value", () => {
    expect(parse(["--tile-mlp", "2048", "--tile-loss", "512"])).toMatchObject({ tileMlp: 2048, tileLoss: 512 });
    expect(parse(["--tile-mlp", "auto", "--tile-loss", "0"])).toMatchObject({ tileMlp: "auto", tileLoss: 0 });
    expect(parse([])).toMatchObject({ tileMlp: "auto", tileLoss: "auto" });
    expect(problems({ tileMlp: 2048, tileLoss: 1 })).toBe("");
    expect(problems({ tileMlp: 1.5 })).toMatch(/--tile-mlp must be 0 \(off\), auto or a positive number of rows per tile, got 1.5/);
    expect(problems({ tileLoss: -4 })).toMatch(/--tile-loss must be 0 \(off\), auto or a positive number of rows per tile, got -4/);
    expect(() => parse(["--tile-loss", "most"])).toThrow(/--tile-loss needs a number or auto, got 'most'/);
  });

  it("sizes auto tiles to at most 4 MiB of logits (at least 256 rows) or 8 MiB of MLP activations, in multiples of 64 rows, and leaves a shard untiled when its buffer fits", () => {
    const rows = (over: Partial<TrainConfig>) => tileRowsOf({ ...DEFAULTS, tileMlp: "auto", tileLoss: "auto", ...over });
    // 4 MiB / (4 bytes x 32768) = 32 rows of logits -> the 256-row floor; a 16384-token sequence over 2 ranks has 8192 rows per rank
    expect(rows({ task: "recall", vocab: 32768, seq: 16384, sp: 2, batch: 1 }).loss).toBe(256);
    // 4 MiB / (4 x 8192) = 128 rows -> 256 too; 4 MiB / (4 x 2048) = 512 rows, above the floor
    expect(rows({ task: "recall", vocab: 8192, seq: 16384, sp: 2, batch: 1 }).loss).toBe(256);
    expect(rows({ task: "recall", vocab: 2048, seq: 16384, sp: 2, batch: 1 }).loss).toBe(512);
    // a shard of 256 rows or fewer stays untiled
    expect(rows({ task: "recall", vocab: 32768, seq: 512, sp: 2, batch: 1 }).loss).toBe(0);
    // 4 MiB / (4 x 1000) = 1048.6 rows -> 1024 (16 x 64)
    expect(rows({ task: "recall", vocab: 1000, seq: 16384, sp: 1, batch: 1 }).loss).toBe(1024);
    // hidden 256, GELU x4: an MLP row is 1024 floats, 8 MiB of them -> 2048 rows, below the 8192 rows of a rank
    expect(rows({ hidden: 256, heads: 8, kvHeads: 8, seq: 16384, sp: 2, batch: 1 }).mlp).toBe(2048);
    // the whole shard fits: untiled (2048 rows per rank, 2048-row tiles)
    expect(rows({ hidden: 256, heads: 8, kvHeads: 8, seq: 4096, sp: 2, batch: 1 }).mlp).toBe(0);
    // hidden 512: an MLP row is 2048 floats -> 1024 rows
    expect(rows({ hidden: 512, heads: 8, kvHeads: 8, seq: 8192, sp: 1, batch: 1 }).mlp).toBe(1024);
    // the default recall run (vocab 73, 1024 rows per rank): untiled; a number is taken as given
    expect(rows({})).toEqual({ mlp: 0, loss: 0 });
    expect(rows({ tileMlp: 24, tileLoss: 0 })).toEqual({ mlp: 24, loss: 0 });
    // a huge vocabulary still gets 256-row tiles
    expect(rows({ task: "recall", vocab: 262144, seq: 4096, sp: 1, batch: 1 }).loss).toBe(256);
  });

  it("takes --tile-attention as head groups (1: off) or auto, the most groups the layout allows, and names a count the heads refuse", () => {
    const groups = (over: Partial<TrainConfig>) => headGroupsOf({ ...DEFAULTS, heads: 8, kvHeads: 8, hidden: 256, ...over });
    expect(parse([])).toMatchObject({ tileAttention: 1 });
    expect(parse(["--tile-attention", "auto"])).toMatchObject({ tileAttention: "auto" });
    expect(groups({ tileAttention: 2 })).toBe(2);
    // 8 heads: one head a group on one rank; Ulysses over 2 ranks needs 2 heads a group, over 4 ranks 4
    expect(groups({ tileAttention: "auto", sp: 1 })).toBe(8);
    expect(groups({ tileAttention: "auto", sp: 2 })).toBe(4);
    expect(groups({ tileAttention: "auto", sp: 4 })).toBe(2);
    // ring attention runs every head on every rank; 2 kv heads allow 2 groups at most
    expect(groups({ tileAttention: "auto", sp: 4, attention: "ring" })).toBe(8);
    expect(groups({ tileAttention: "auto", sp: 1, kvHeads: 2 })).toBe(2);
    expect(groups({ tileAttention: "auto", sp: 8, heads: 8 })).toBe(1);
    expect(problems({ heads: 8, kvHeads: 8, hidden: 256, tileAttention: 3 })).toMatch(/--tile-attention 3 must divide --heads 8 and --kv-heads 8/);
    expect(problems({ heads: 8, kvHeads: 8, hidden: 256, sp: 2, tileAttention: 8 })).toMatch(
      /--tile-attention 8 leaves 1 heads per group, fewer than the 2 ranks of a Ulysses group \(each needs a query head\): use at most 4 groups/,
    );
    expect(problems({ tileAttention: 0 })).toMatch(/--tile-attention must be 1 \(off\), auto or a positive number of head groups, got 0/);
    expect(problems({ heads: 8, kvHeads: 8, hidden: 256, sp: 2, tileAttention: "auto" })).toBe("");
  });

  it("takes --keep-attention-outputs with head groups, without checkpointing, on unpipelined Ulysses; names each conflict", () => {
    const shape = { heads: 8, kvHeads: 8, hidden: 256, sp: 2 };
    expect(parse(["--keep-attention-outputs"])).toMatchObject({ keepAttentionOutputs: true });
    expect(parse([])).toMatchObject({ keepAttentionOutputs: false });
    expect(problems({ ...shape, tileAttention: "auto", keepAttentionOutputs: true })).toBe("");
    expect(problems({ ...shape, keepAttentionOutputs: true })).toMatch(
      /--keep-attention-outputs keeps the outputs of attention in head groups: it needs --tile-attention with more than one group \(--tile-attention 1 gives 1\)/,
    );
    expect(problems({ ...shape, tileAttention: 2, activationCheckpointing: true, keepAttentionOutputs: true })).toMatch(
      /--keep-attention-outputs and --activation-checkpointing exclude each other/,
    );
    expect(problems({ ...shape, sp: 4, attention: "ring", tileAttention: 2, keepAttentionOutputs: true })).toMatch(
      /--keep-attention-outputs needs an attention that keeps its output for backward: --attention ulysses without --ulysses-head-groups \(got --attention ring\)/,
    );
    expect(problems({ ...shape, tileAttention: 2, ulyssesHeadGroups: 2, keepAttentionOutputs: true })).toMatch(
      /\(got --attention ulysses --ulysses-head-groups 2\)/,
    );
  });

  it("names hybrid degree and layout problems in flag names; reads --ulysses-degree, --ring-degree and --sequence-layout", () => {
    expect(problems({ sp: 8, attention: "hybrid", ulyssesDegree: 3 })).toMatch(
      /--ulysses-degree 3 x --ring-degree 2.667 must be positive integers whose product is --sp 8/,
    );
    expect(problems({ sp: 8, heads: 4, attention: "hybrid", ulyssesDegree: 8 })).toMatch(/--heads 4 is smaller than --ulysses-degree 8/);
    expect(problems({ sp: 2, ringDegree: 2 })).toMatch(/--ring-degree 2 is for hybrid attention only \(--attention is ulysses\)/);
    expect(problems({ sp: 2, sequenceLayout: "zigzag" })).toMatch(/--sequence-layout zigzag balances a ring; ulysses attention has none/);
    expect(problems({ sequenceLayout: "spiral" as never })).toMatch(/--sequence-layout must be auto, contiguous or zigzag, got 'spiral'/);
    expect(problems({ sp: 8, heads: 4, hidden: 64, kvHeads: 2, attention: "hybrid", ringDegree: 4, sequenceLayout: "contiguous" })).toBe("");
    const config = parse(["--attention", "hybrid", "--sp", "4", "--ulysses-degree", "2", "--sequence-layout", "contiguous"]);
    expect([config.attention, config.ulyssesDegree, config.ringDegree, config.sequenceLayout]).toEqual(["hybrid", 2, null, "contiguous"]);
    expect(helpText()).toMatch(/--ulysses-degree <n>[\s\S]*--ring-degree <n>[\s\S]*--sequence-layout <value>[\s\S]*--ulysses-head-groups <n>/);
    expect(problems({ sp: 2, heads: 4, ulyssesHeadGroups: 4 })).toMatch(/--heads 4 \/ --ulysses-head-groups 4 = 1 heads per chunk is fewer than --sp 2/);
    expect(problems({ sp: 2, attention: "ring", ulyssesHeadGroups: 2 })).toMatch(/--ulysses-head-groups 2 pipelines Ulysses' exchanges; --attention is ring/);
    expect(problems({ ulyssesHeadGroups: 0 })).toMatch(/--ulysses-head-groups must be a positive integer, got 0/);
    expect(problems({ sp: 2, heads: 4, kvHeads: 4, ulyssesHeadGroups: 2 })).toBe("");
  });
});

describe("localRanksOnHost", () => {
  it("reads mpirun's local size and falls back to 1", async () => {
    const { localRanksOnHost } = await import("@ulysses/collectives");
    expect(localRanksOnHost({ OMPI_COMM_WORLD_LOCAL_SIZE: "4" })).toBe(4);
    expect(localRanksOnHost({})).toBe(1);
    expect(localRanksOnHost({ OMPI_COMM_WORLD_LOCAL_SIZE: "zero" })).toBe(1);
  });
});

describe("--kernel", () => {
  const problems = (overrides: Partial<TrainConfig>) => {
    try {
      validateConfig({ ...DEFAULTS, ...overrides }, {});
      return "";
    } catch (error) {
      return (error as Error).message;
    }
  };
  it("accepts auto, fused and ort and names a bad value", () => {
    expect(problems({ kernel: "ort" })).toBe("");
    expect(problems({ kernel: "flash" as never })).toMatch(/--kernel must be auto, fused or ort, got 'flash'/);
  });
  it("auto resolves to a kernel this machine has, and ort is always ort", async () => {
    const { resolveKernel } = await import("@ulysses/native-ops");
    const { fusedAttentionStatus } = await import("@ulysses/native-ops");
    expect(resolveKernel("ort").kernel).toBe("ort");
    expect(resolveKernel("auto").kernel).toBe(fusedAttentionStatus().available ? "fused" : "ort");
  });
});

describe("resuming a hybrid run", () => {
  const recorded: TrainConfig = { ...DEFAULTS, sp: 4, attention: "hybrid", ulyssesDegree: 2, sequenceLayout: "contiguous" };
  const checkpoint = { file: "run/checkpoint.safetensors", step: 10, config: gptConfigOf(recorded), settings: checkpointSettings(recorded) };
  it("keeps the recorded degrees and layout unless the scheme changes; a new --attention or --sp resets them", () => {
    const same = resumeSettings({ ...DEFAULTS }, new Set(), checkpoint).config;
    expect([same.attention, same.ulyssesDegree, same.sequenceLayout]).toEqual(["hybrid", 2, "contiguous"]);
    const ulysses = resumeSettings({ ...DEFAULTS, attention: "ulysses" }, new Set(["attention"]), checkpoint).config;
    expect([ulysses.sp, ulysses.attention, ulysses.ulyssesDegree, ulysses.ringDegree, ulysses.sequenceLayout]).toEqual([4, "ulysses", null, null, "auto"]);
    expect(() => validateConfig(ulysses)).not.toThrow();
  });
});

describe("resuming a run that recorded the ZeRO stage", () => {
  const checkpoint = (settings: Record<string, unknown>) => ({ file: "run/checkpoint.safetensors", step: 10, config: gptConfigOf(DEFAULTS), settings });
  it("keeps the recorded stage and shared weights; reads an older checkpoint's zero1: true as --zero 1; a --zero given now wins", () => {
    const recorded = checkpointSettings({ ...DEFAULTS, zero: 2, sharedWeights: true });
    expect(resumeSettings({ ...DEFAULTS }, new Set(), checkpoint(recorded)).config).toMatchObject({ zero: 2, sharedWeights: true });
    const { zero: _, sharedWeights: __, ...older } = recorded;
    expect(resumeSettings({ ...DEFAULTS }, new Set(), checkpoint({ ...older, zero1: true })).config.zero).toBe(1);
    expect(resumeSettings({ ...DEFAULTS, zero: 0 }, new Set(["zero"]), checkpoint({ ...older, zero1: true })).config.zero).toBe(0);
  });
});

describe("resuming a recall run", () => {
  const resume = (recorded: TrainConfig, given: Partial<TrainConfig> = {}) => {
    const checkpoint = { file: "run/checkpoint.safetensors", step: 10, config: gptConfigOf(recorded), settings: checkpointSettings(recorded) };
    return resumeSettings({ ...DEFAULTS, ...given }, new Set(Object.keys(given) as (keyof TrainConfig)[]), checkpoint).config;
  };
  it("records the same settings as the uninterrupted run: the default vocabulary stays null (the CI kill -9 test compares them)", () => {
    const recorded: TrainConfig = { ...DEFAULTS, keys: 3, values: 4 };
    expect(checkpointSettings(resume(recorded))).toEqual(checkpointSettings(recorded));
    expect(resume(recorded).vocab).toBeNull();
  });
  it("takes the model's vocabulary where it is not the default one: an explicit --vocab, or --keys/--values changed now", () => {
    expect(resume({ ...DEFAULTS, keys: 3, values: 4, vocab: 40 }).vocab).toBe(40);
    // 3 x (4 + 1) + 1 = 16 tokens in the model; --keys 2 alone would imply 11
    const changed = resume({ ...DEFAULTS, keys: 3, values: 4 }, { keys: 2 });
    expect([changed.keys, changed.vocab]).toEqual([2, 16]);
  });
});
