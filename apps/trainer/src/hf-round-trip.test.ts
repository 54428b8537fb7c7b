/**
 * Import then export through the trainer: `ulysses-train --model DIR --steps
 * 0` writes hf/ whose tensors are bit for bit the source directory's, in the
 * source's dtype (bf16 in one file, fp16 from shards with an index), with the
 * tokenizer files copied and config.json's fields kept.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { exportHfDirectory, gptParamSpecs, importWeights, modelFamilyOf, ParameterStore, readSafetensors, type HfDType } from "@ulysses/model";
import { main as trainMain } from "./cli.js";
import { captureMain } from "./testing-fixtures/capture.js";
import { tinyLlamaConfig, writeChat, writeTinyHfModel } from "./testing-fixtures/tiny-hf.js";

process.env.ORT_DISABLE_TELEMETRY = "1";
const root = fs.mkdtempSync(path.join(os.tmpdir(), "ulysses-hf-trip-"));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

const chat = writeChat(path.join(root, "chat.jsonl"), 1, () => ["Hi", "Hello there."]);

/** A source directory in `dtype` (shards of at most `maxShardBytes`): the fp32 fixture re-exported. */
function source(name: string, dtype: HfDType, torchDtype: string, maxShardBytes?: number): string {
  const fp32 = writeTinyHfModel(path.join(root, `${name}-fp32`), tinyLlamaConfig({ torch_dtype: torchDtype, tie_word_embeddings: false }));
  const json = JSON.parse(fs.readFileSync(path.join(fp32, "config.json"), "utf8"));
  const family = modelFamilyOf(json, "config.json");
  const config = family.configFrom(json, "config.json");
  const params = new ParameterStore(gptParamSpecs(config));
  importWeights(fp32, config, family, params);
  const dir = path.join(root, name);
  exportHfDirectory(dir, params, config, family, json, { dtype, tokenizerFrom: fp32, ...(maxShardBytes === undefined ? {} : { maxShardBytes }) });
  return dir;
}

/** Every tensor's dtype, shape and bytes in a directory's safetensors files, by name. */
function tensors(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".safetensors"))) {
    for (const [name, t] of readSafetensors(path.join(dir, file)).tensors) {
      const bytes = Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength).toString("base64");
      out.set(name, `${t.dtype} [${t.shape.join(", ")}] ${bytes}`);
    }
  }
  return out;
}

describe("ulysses-train --model DIR --steps 0", () => {
  for (const [name, dtype, torchDtype, shard] of [
    ["bf16", "bfloat16", "bfloat16", undefined],
    ["fp16-sharded", "float16", "float16", 2_000_000],
  ] as const) {
    it(`exports hf/ bit-identical to a ${name} source`, async () => {
      const dir = source(name, dtype, torchDtype, shard);
      const out = path.join(root, `run-${name}`);
      const argv = ["--model", dir, "--data", chat, "--data-format", "chat", "--seq", "64", "--sp", "1", "--backend", "local", "--steps", "0", "--out", out];
      const { code, stderr } = await captureMain(trainMain, argv);
      expect(code, stderr).toBe(0);
      const hf = path.join(out, "hf");
      const want = tensors(dir);
      expect(want.size).toBeGreaterThan(10);
      expect(tensors(hf)).toEqual(want);
      // the trainer shards at 5 GiB: a small model comes back as one file whatever the source's shards
      expect(fs.readdirSync(hf).filter((f) => f.endsWith(".safetensors"))).toEqual(["model.safetensors"]);
      expect(JSON.parse(fs.readFileSync(path.join(hf, "config.json"), "utf8"))).toEqual(JSON.parse(fs.readFileSync(path.join(dir, "config.json"), "utf8")));
      for (const file of ["tokenizer.json", "tokenizer_config.json"])
        expect(fs.readFileSync(path.join(hf, file))).toEqual(fs.readFileSync(path.join(dir, file)));
    }, 300_000);
  }
});
