/**
 * Importing a Hugging Face model directory's weights, written by the test
 * itself under Hugging Face's names and layout ([out, in] matrices, bf16,
 * one file or shards with an index): every parameter must hold exactly the
 * values the test put in its tensor, transposed where the family says so.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Tensor, bfloat16BitsToFloat32, float32ToBfloat16Bits } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { gptParamSpecs } from "../gpt-config.js";
import { ParameterStore } from "../parameters.js";
import { writeSafetensors } from "../safetensors.js";
import { importWeights } from "./import-weights.js";
import { llamaFamily } from "./llama.js";

const config = llamaFamily.configFrom(
  {
    model_type: "llama",
    hidden_size: 8,
    num_attention_heads: 2,
    num_key_value_heads: 1,
    intermediate_size: 12,
    num_hidden_layers: 2,
    vocab_size: 16,
    max_position_embeddings: 32,
    tie_word_embeddings: false,
  },
  "tiny/config.json",
);

/** The test's own value of element i of the tensor named `name`: multiples of 1/8 in [-1, 1], exact in bf16. */
function elementValue(name: string, i: number): number {
  let h = 0;
  for (const c of name) h = (h * 31 + c.charCodeAt(0)) % 9973;
  return (((h + 5 * i) % 17) - 8) / 8;
}

/** Hugging Face's tensors of `config`, by name: [out, in] matrices, in `dtype`. */
function hfTensors(dtype: "float32" | "bfloat16"): Map<string, Tensor> {
  const tensors = new Map<string, Tensor>();
  for (const spec of gptParamSpecs(config)) {
    const t = llamaFamily.tensorOf(spec.name, config);
    const shape = t.transposed ? [...spec.shape].reverse() : [...spec.shape];
    const size = shape.reduce((a, b) => a * b, 1);
    const values = Array.from({ length: size }, (_, i) => elementValue(t.name, i));
    tensors.set(
      t.name,
      dtype === "float32"
        ? new Tensor("float32", shape, Float32Array.from(values))
        : new Tensor("bfloat16", shape, Uint16Array.from(values, float32ToBfloat16Bits)),
    );
  }
  return tensors;
}

function writeSharded(
  dir: string,
  tensors: Map<string, Tensor>,
  shardOf: (i: number) => string = (i) => `model-0000${(i % 2) + 1}-of-00002.safetensors`,
): void {
  const shards = new Map<string, Map<string, Tensor>>();
  const weightMap: Record<string, string> = {};
  [...tensors].forEach(([name, t], i) => {
    const shard = shardOf(i);
    weightMap[name] = shard;
    if (!shards.has(shard)) shards.set(shard, new Map());
    shards.get(shard)!.set(name, t);
  });
  for (const [shard, contents] of shards) if (!shard.includes("/")) writeSafetensors(path.join(dir, shard), contents);
  fs.writeFileSync(path.join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: weightMap }));
}

function expectImported(params: ParameterStore): void {
  for (const spec of gptParamSpecs(config)) {
    const t = llamaFamily.tensorOf(spec.name, config);
    const got = params.value(spec.name).data;
    const [rows, cols] = spec.shape.length === 2 ? (spec.shape as [number, number]) : [1, spec.shape[0]!];
    for (let r = 0; r < rows; r++)
      for (let c = 0; c < cols; c++) {
        // ours [in, out] at (r, c) is Hugging Face's [out, in] at (c, r)
        const hf = t.transposed ? c * rows + r : r * cols + c;
        expect(got[r * cols + c], `${spec.name}[${r}, ${c}]`).toBe(bfloat16BitsToFloat32(float32ToBfloat16Bits(elementValue(t.name, hf))));
      }
  }
}

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "import-weights-"));
const fresh = () => new ParameterStore(gptParamSpecs(config));

describe("importWeights (llama family)", () => {
  it("reads bf16 shards through the index, and one fp32 model.safetensors, into the parameters, transposed", () => {
    const sharded = tmp();
    writeSharded(sharded, hfTensors("bfloat16"));
    const params = fresh();
    importWeights(sharded, config, llamaFamily, params);
    expectImported(params);
    const single = tmp();
    const tensors = hfTensors("float32");
    tensors.set("model.layers.0.self_attn.rotary_emb.inv_freq", new Tensor("float32", [2], Float32Array.of(1, 0.5)));
    writeSafetensors(path.join(single, "model.safetensors"), tensors);
    const fromOne = fresh();
    importWeights(single, config, llamaFamily, fromOne);
    expectImported(fromOne);
  });

  it("into sharded stores (ZeRO-3): each of 3 ranks holds its slice of the whole import, transposed matrices included", () => {
    const dir = tmp();
    writeSharded(dir, hfTensors("bfloat16"));
    const whole = fresh();
    importWeights(dir, config, llamaFamily, whole);
    let covered = 0;
    for (let rank = 0; rank < 3; rank++) {
      const shard = new ParameterStore(gptParamSpecs(config), { shard: { rank, ranks: 3 } });
      importWeights(dir, config, llamaFamily, shard);
      const { offset, length } = shard.shard;
      expect([...shard.owned]).toEqual([...whole.values.subarray(offset, offset + length)]);
      covered += length;
    }
    expect(covered).toBe(whole.size);
  });

  it("names the file and the key of a missing, extra or wrongly shaped tensor, and refuses shard names outside the directory", () => {
    const base = hfTensors("bfloat16");
    const run = (tensors: Map<string, Tensor>, shardOf?: (i: number) => string) => {
      const dir = tmp();
      writeSharded(dir, tensors, shardOf);
      return () => importWeights(dir, config, llamaFamily, fresh());
    };
    const missing = new Map(base);
    missing.delete("model.layers.1.mlp.up_proj.weight");
    expect(run(missing)).toThrow(/'.*model\.safetensors\.index\.json': the llama model's tensor 'model\.layers\.1\.mlp\.up_proj\.weight' is missing/);
    const extra = new Map(base).set("model.layers.0.mlp.extra.weight", new Tensor("float32", [1]));
    expect(run(extra)).toThrow(/'.*model-0000\d-of-00002\.safetensors': tensor 'model\.layers\.0\.mlp\.extra\.weight' is not a weight of this llama model/);
    const wrong = new Map(base).set("model.norm.weight", new Tensor("float32", [9]));
    expect(run(wrong)).toThrow(/'.*model-0000\d-of-00002\.safetensors': tensor 'model\.norm\.weight' has shape \[9\], the config says \[8\]/);
    expect(run(base, () => "../escape.safetensors")).toThrow(
      /weight_map\["model\.embed_tokens\.weight"\] must name a \.safetensors file in the same directory, got "\.\.\/escape\.safetensors"/,
    );
    const absent = tmp();
    writeSharded(absent, base);
    fs.rmSync(path.join(absent, "model-00002-of-00002.safetensors"));
    expect(() => importWeights(absent, config, llamaFamily, fresh())).toThrow(/could not read safetensors file '.*model-00002-of-00002\.safetensors'/);
  });
});
