import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { CHECKPOINT_FORMAT, inspectCheckpoint, loadCheckpoint } from "./checkpoint.js";
import { GPT_CONFIG_LIMITS, gptParamSpecs, type GptConfig } from "@ulysses/model";

const TINY: GptConfig = { vocab: 8, hidden: 4, heads: 2, kvHeads: 2, layers: 1, mlp: "gelu", mlpRatio: 2, maxSeq: 8, tiedHead: false };

interface CraftedTensor {
  name: string;
  shape: number[];
  dtype?: string;
}

/**
 * Writes a checkpoint by hand (no writer code): the header JSON with the
 * given metadata and tensors laid out back to back, then the data, every
 * float32 element of tensor i equal to i.
 */
function craft(dir: string, name: string, config: unknown, tensors: CraftedTensor[], extraMetadata: Record<string, string> = {}): string {
  const header: Record<string, unknown> = { __metadata__: { format: CHECKPOINT_FORMAT, step: "3", config: JSON.stringify(config), ...extraMetadata } };
  let offset = 0;
  for (const t of tensors) {
    const bytes = t.shape.reduce((a, b) => a * b, 1) * (t.dtype === "F64" ? 8 : 4);
    header[t.name] = { dtype: t.dtype ?? "F32", shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  const data = new DataView(out.buffer, 8 + json.length);
  let at = 0;
  tensors.forEach((t, i) => {
    const n = t.shape.reduce((a, b) => a * b, 1);
    for (let k = 0; k < n; k++, at += t.dtype === "F64" ? 8 : 4) {
      if (t.dtype === "F64") data.setFloat64(at, i, true);
      else data.setFloat32(at, i, true);
    }
  });
  const file = path.join(dir, name);
  fs.writeFileSync(file, out);
  return file;
}

const paramsOf = (config: GptConfig): CraftedTensor[] => gptParamSpecs(config).map((s) => ({ name: s.name, shape: [...s.shape] }));
const countOf = (config: GptConfig) => gptParamSpecs(config).reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
const withMoments = (config: GptConfig, n = countOf(config)): CraftedTensor[] => [
  ...paramsOf(config),
  { name: "optimizer.m", shape: [n] },
  { name: "optimizer.v", shape: [n] },
];

/** Expects loadCheckpoint(file) to throw a TrainingError naming the file and matching `pattern`, in under 1 s and 100 MB of RSS. */
/** Both readers (the whole file, and the header only) refuse `file` quickly and cheaply; returns loadCheckpoint's message. */
function expectRefused(file: string, pattern: RegExp): string {
  const messages = [loadCheckpoint, inspectCheckpoint].map((read) => {
    const rss = process.memoryUsage().rss;
    const started = performance.now();
    let error: Error | null = null;
    try {
      read(file);
    } catch (e) {
      error = e as Error;
    }
    const ms = performance.now() - started;
    const grown = process.memoryUsage().rss - rss;
    expect(error, `${read.name} did not refuse the file`).not.toBeNull();
    // the safetensors reader (@ulysses/model) refuses the container, the checkpoint reader its contents
    expect(["ModelError", "TrainingError"]).toContain(error!.name);
    expect(error!.message).toContain(file);
    expect(error!.message).toMatch(pattern);
    expect(ms).toBeLessThan(1000);
    expect(grown).toBeLessThan(100 * 2 ** 20);
    return error!.message;
  });
  return messages[0]!;
}

describe("loadCheckpoint from untrusted files", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ckpt-crafted-"));

  it("loads a hand-built checkpoint with and without optimizer moments", () => {
    const file = craft(dir, "good.safetensors", TINY, withMoments(TINY), { rng: "[1,2]" });
    const c = loadCheckpoint(file);
    expect(c.step).toBe(3);
    expect(c.config).toEqual(TINY);
    expect(c.rng).toEqual([1, 2]);
    expect(c.weights.get("embed.weight")!.shape).toEqual([8, 4]);
    expect(c.m!.length).toBe(countOf(TINY));
    expect(c.v![0]).toBe(paramsOf(TINY).length + 1);
    const header = inspectCheckpoint(file);
    expect([header.file, header.step, header.config, header.rng]).toEqual([file, 3, TINY, [1, 2]]);
    const weightsOnly = loadCheckpoint(craft(dir, "weights-only.safetensors", TINY, paramsOf(TINY)));
    expect(weightsOnly.m).toBeNull();
    expect(weightsOnly.v).toBeNull();
  });

  it("keeps a Hugging Face family's model fields (width, eps, RoPE base and scaling) and checks the scaling strictly", () => {
    const llama: GptConfig = {
      ...TINY,
      mlp: "swiglu",
      norm: "rmsnorm",
      mlpHidden: 6,
      eps: 1e-6,
      ropeBase: 500000,
      ropeScaling: { type: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 },
    };
    const file = craft(dir, "llama.safetensors", { ...llama, attention: "ulysses" }, withMoments(llama));
    expect(loadCheckpoint(file).config).toEqual(llama);
    expect(inspectCheckpoint(file).config).toEqual(llama);
    const scaling = llama.ropeScaling!;
    expectRefused(
      craft(dir, "scaling-type.safetensors", { ...llama, ropeScaling: { ...scaling, type: "dynamic" } }, withMoments(llama)),
      /ropeScaling\.type must be one of "linear", "llama3", "yarn", got "dynamic"/,
    );
    expectRefused(
      craft(dir, "scaling-extra.safetensors", { ...llama, ropeScaling: { type: "linear", factor: 2, lowFreqFactor: 1 } }, withMoments(llama)),
      /ropeScaling\.lowFreqFactor is not a field of a linear RoPE scaling/,
    );
    expectRefused(
      craft(dir, "scaling-factor.safetensors", { ...llama, ropeScaling: { ...scaling, factor: -1 } }, withMoments(llama)),
      /ropeScaling\.factor must be a finite number > 0, got -1/,
    );
  });

  it("keeps a Hugging Face model's fields: head width, biases, q/k norm, MLP width, eps, RoPE base", () => {
    const qwen: GptConfig = {
      ...TINY,
      headDim: 6,
      attentionBias: "qkv",
      mlpBias: false,
      qkNorm: true,
      norm: "rmsnorm",
      mlp: "swiglu",
      mlpHidden: 10,
      eps: 1e-6,
      ropeBase: 1e6,
    };
    const c = loadCheckpoint(craft(dir, "qwen.safetensors", qwen, withMoments(qwen)));
    expect(c.config).toEqual(qwen);
    expect(c.weights.get("blocks.0.attn.q_norm.gamma")!.shape).toEqual([6]);
    expect(c.weights.get("blocks.0.attn.q.b")!.shape).toEqual([TINY.heads * 6]);
    expectRefused(
      craft(dir, "config-head-dim.safetensors", { ...qwen, headDim: 7 }, withMoments(qwen)),
      /headDim must be an even integer from 2 to 4096, got 7/,
    );
    expectRefused(
      craft(dir, "config-bias.safetensors", { ...qwen, attentionBias: "qk" }, withMoments(qwen)),
      /attentionBias must be "none", "qkv" or "qkvo", got "qk"/,
    );
    expectRefused(craft(dir, "config-qk-norm.safetensors", { ...qwen, qkNorm: 1 }, withMoments(qwen)), /qkNorm must be true or false, got 1/);
  });

  it("refuses a config with layers 1e8 before building its parameter list", () => {
    const file = craft(dir, "layers.safetensors", { ...TINY, layers: 1e8 }, withMoments(TINY));
    expectRefused(file, new RegExp(`layers 100000000 is above the limit of ${GPT_CONFIG_LIMITS.layers}`));
  });

  it("refuses a config with hidden 1e9", () => {
    const file = craft(dir, "hidden.safetensors", { ...TINY, hidden: 1e9, heads: 1e3, kvHeads: 1e3 }, withMoments(TINY));
    expectRefused(file, new RegExp(`hidden 1000000000 is above the limit of ${GPT_CONFIG_LIMITS.hidden}`));
  });

  it("refuses a config whose parameter count is beyond the limit", () => {
    const file = craft(dir, "params.safetensors", { ...TINY, layers: 4096, hidden: 8192, heads: 64, kvHeads: 64 }, withMoments(TINY));
    expectRefused(file, /make about .* parameters, above the limit of 2147483647/);
  });

  it("refuses configs that are not objects or have values of the wrong type", () => {
    expectRefused(craft(dir, "config-array.safetensors", [1, 2], withMoments(TINY)), /metadata 'config' must be a JSON object/);
    expectRefused(
      craft(dir, "config-ratio.safetensors", { ...TINY, mlpRatio: 1e9 }, withMoments(TINY)),
      /mlpRatio must be a number in \(0, 64\], got 1000000000/,
    );
    expectRefused(craft(dir, "config-tied.safetensors", { ...TINY, tiedHead: "no" }, withMoments(TINY)), /tiedHead must be true or false, got "no"/);
    expectRefused(
      craft(dir, "config-heads.safetensors", { ...TINY, heads: 3, kvHeads: 3 }, withMoments(TINY)),
      /hidden \(4\) must be divisible by heads \(3\)/,
    );
  });

  it("refuses a config that does not match the file's tensors", () => {
    const bigger = { ...TINY, hidden: 8 };
    expectRefused(craft(dir, "mismatch.safetensors", bigger, withMoments(TINY)), /parameter 'embed.weight' should be float32 \[8, 8\], found float32 \[8, 4\]/);
    const deeper = { ...TINY, layers: 3000 };
    expectRefused(
      craft(dir, "deeper.safetensors", deeper, withMoments(TINY)),
      /implies 30004 parameters, but 29990 are not in the file: 'blocks.1.norm1.gamma', .* and 29985 more/,
    );
    const f64 = paramsOf(TINY).map((t, i) => (i === 0 ? { ...t, dtype: "F64", shape: [8, 2] } : t));
    expectRefused(craft(dir, "dtype.safetensors", TINY, f64), /parameter 'embed.weight' should be float32 \[8, 4\], found float64 \[8, 2\]/);
  });

  it("refuses unknown extra tensors and moments of the wrong length", () => {
    expectRefused(
      craft(dir, "extra.safetensors", TINY, [...withMoments(TINY), { name: "evil", shape: [2] }]),
      /1 tensors are not parameters of the model config .*: 'evil'/,
    );
    expectRefused(
      craft(dir, "moments.safetensors", TINY, withMoments(TINY, 5)),
      new RegExp(`'optimizer.m' should be float32 \\[${countOf(TINY)}\\] \\(the parameter count\\), found float32 \\[5\\]`),
    );
    expectRefused(
      craft(dir, "one-moment.safetensors", TINY, [...paramsOf(TINY), { name: "optimizer.m", shape: [countOf(TINY)] }]),
      /has 'optimizer.m' but not 'optimizer.v'/,
    );
  });

  it("refuses aliased tensor ranges in a checkpoint", () => {
    const file = path.join(dir, "aliased.safetensors");
    const header: Record<string, unknown> = { __metadata__: { format: CHECKPOINT_FORMAT, step: "0", config: JSON.stringify(TINY) } };
    for (const spec of gptParamSpecs(TINY))
      header[spec.name] = { dtype: "F32", shape: spec.shape, data_offsets: [0, spec.shape.reduce((a, b) => a * b, 1) * 4] };
    const json = new TextEncoder().encode(JSON.stringify(header));
    const out = new Uint8Array(8 + json.length + 8 * 4 * 4);
    new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
    out.set(json, 8);
    fs.writeFileSync(file, out);
    expectRefused(file, /overlap tensor/);
  });

  it("refuses a bad format or step naming the file", () => {
    expectRefused(craft(dir, "format.safetensors", TINY, paramsOf(TINY), { format: "other/1" }), /is not a ulysses-ts checkpoint \(format 'other\/1'/);
    expectRefused(craft(dir, "step.safetensors", TINY, paramsOf(TINY), { step: "-1" }), /step '-1' is not a non-negative integer/);
  });
});
