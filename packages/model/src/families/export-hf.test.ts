/**
 * exportHfDirectory against what the test itself wrote: a llama directory
 * (Hugging Face names, [out, in] matrices) in fp32, bf16 or fp16, imported
 * and exported with no training, must come back bit-identical tensor by
 * tensor, in one file or in shards whose index the test checks against the
 * shard files; the exported directory re-imports to the same parameters.
 * bf16 rounding is checked on chosen float32 bit patterns against the bits
 * written below (ties to even both ways, overflow to inf, NaN, subnormals).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Tensor, bytesPerElement } from "@ulysses/tensors";
import { describe, expect, it } from "vitest";
import { gptParamSpecs, type GptConfig } from "../gpt-config.js";
import { ParameterStore } from "../parameters.js";
import { readSafetensors, readSafetensorsHeader, writeSafetensors } from "../safetensors.js";
import { exportHfDirectory, shardName, type HfDType } from "./export-hf.js";
import { modelFamilyOf } from "./family.js";
import { gptFamily } from "./gpt.js";
import { importWeights } from "./import-weights.js";
import { llamaFamily } from "./llama.js";

const hfConfig = {
  model_type: "llama",
  hidden_size: 8,
  num_attention_heads: 2,
  num_key_value_heads: 1,
  intermediate_size: 12,
  num_hidden_layers: 2,
  vocab_size: 16,
  max_position_embeddings: 32,
  tie_word_embeddings: false,
  torch_dtype: "float32",
};
const config = llamaFamily.configFrom(hfConfig, "tiny/config.json");
const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), "export-hf-"));

/** Random bit patterns of finite values of `dtype` (exponent field never all ones). */
function randomTensor(dtype: HfDType, shape: number[], seed: number): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  let s = seed >>> 0;
  const next = () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s;
  };
  if (dtype === "float32") {
    const bits = Uint32Array.from({ length: n }, () => {
      const b = next();
      return (b & 0x7f800000) === 0x7f800000 ? b & 0xbfffffff : b;
    });
    return new Tensor("float32", shape, new Float32Array(bits.buffer));
  }
  const exponent = dtype === "bfloat16" ? 0x7f80 : 0x7c00;
  const bits = Uint16Array.from({ length: n }, () => {
    const b = next() >>> 16;
    return (b & exponent) === exponent ? b & ~(exponent & ~(exponent >> 1)) & 0xffff : b;
  });
  return new Tensor(dtype, shape, bits);
}

/** The llama tensors of `config` in `dtype`, by name. */
function sourceTensors(dtype: HfDType): Map<string, Tensor> {
  const tensors = new Map<string, Tensor>();
  gptParamSpecs(config).forEach((spec, i) => {
    const t = llamaFamily.tensorOf(spec.name, config);
    tensors.set(t.name, randomTensor(dtype, t.transposed ? [...spec.shape].reverse() : [...spec.shape], 17 + i));
  });
  return tensors;
}

function bytes(t: Tensor): Uint8Array {
  return new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

/** Every tensor of an exported directory, by name, with the file it is in. */
function exported(dir: string): Map<string, { tensor: Tensor; file: string }> {
  const out = new Map<string, { tensor: Tensor; file: string }>();
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".safetensors"))) {
    for (const [name, tensor] of readSafetensors(path.join(dir, file)).tensors) {
      expect(out.has(name), `${name} in two files`).toBe(false);
      out.set(name, { tensor, file });
    }
  }
  return out;
}

describe("exportHfDirectory", () => {
  for (const dtype of ["float32", "bfloat16", "float16"] as const) {
    for (const sharded of [false, true]) {
      it(`import then export of a ${dtype} llama directory is bit-identical, ${sharded ? "sharded with an index" : "one model.safetensors"}`, () => {
        const source = tmp();
        const tensors = sourceTensors(dtype);
        writeSafetensors(path.join(source, "model.safetensors"), tensors);
        fs.writeFileSync(path.join(source, "config.json"), JSON.stringify(hfConfig));
        fs.writeFileSync(path.join(source, "tokenizer.json"), '{"t": 1}');
        fs.writeFileSync(path.join(source, "generation_config.json"), '{"g": 2}');
        const params = new ParameterStore(gptParamSpecs(config));
        importWeights(source, config, llamaFamily, params);
        const target = path.join(tmp(), "hf");
        const elementBytes = bytesPerElement(dtype);
        // 200 bytes: several tensors per shard, and the embedding [16, 8] (and head) larger than one shard
        const maxShardBytes = sharded ? 200 : undefined;
        const result = exportHfDirectory(target, params, config, llamaFamily, hfConfig, { dtype, maxShardBytes, tokenizerFrom: source });
        const got = exported(target);
        expect([...got.keys()].sort()).toEqual([...tensors.keys()].sort());
        for (const [name, t] of tensors) {
          const out = got.get(name)!.tensor;
          expect(out.dtype, name).toBe(dtype);
          expect(out.shape, name).toEqual(t.shape);
          expect(Buffer.from(bytes(out)).equals(Buffer.from(bytes(t))), `${name} bytes`).toBe(true);
        }
        const total = [...tensors.values()].reduce((n, t) => n + t.size * elementBytes, 0);
        expect(result.totalBytes).toBe(total);
        const files = fs.readdirSync(target).sort();
        expect(JSON.parse(fs.readFileSync(path.join(target, "config.json"), "utf8"))).toEqual({ ...hfConfig, torch_dtype: dtype });
        expect(fs.readFileSync(path.join(target, "tokenizer.json"), "utf8")).toBe('{"t": 1}');
        expect(fs.readFileSync(path.join(target, "generation_config.json"), "utf8")).toBe('{"g": 2}');
        if (!sharded) {
          expect(files).toEqual(["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"]);
        } else {
          const index = JSON.parse(fs.readFileSync(path.join(target, "model.safetensors.index.json"), "utf8"));
          expect(index.metadata).toEqual({ total_size: total });
          const shardFiles = files.filter((f) => f.endsWith(".safetensors"));
          const n = shardFiles.length;
          expect(n).toBeGreaterThan(2);
          expect(shardFiles).toEqual(
            Array.from({ length: n }, (_, i) => `model-${String(i + 1).padStart(5, "0")}-of-${String(n).padStart(5, "0")}.safetensors`),
          );
          expect(shardName(0, n)).toBe(shardFiles[0]);
          expect(Object.keys(index.weight_map).sort()).toEqual([...tensors.keys()].sort());
          for (const [name, { file }] of got) expect(index.weight_map[name], name).toBe(file);
          for (const file of shardFiles) {
            const header = readSafetensorsHeader(path.join(target, file));
            // a shard over the limit holds one tensor alone
            if (header.dataLength > 200) expect(header.entries.length, file).toBe(1);
            expect(header.metadata).toEqual({ format: "pt" });
          }
        }
        // the exported directory reads back into the same parameters
        const again = new ParameterStore(gptParamSpecs(config));
        importWeights(target, config, modelFamilyOf(JSON.parse(fs.readFileSync(path.join(target, "config.json"), "utf8")), "config.json"), again);
        for (const spec of gptParamSpecs(config)) expect(again.value(spec.name).data, spec.name).toEqual(params.value(spec.name).data);
        // nothing temporary is left beside it
        expect(fs.readdirSync(path.dirname(target))).toEqual(["hf"]);
      });
    }
  }

  it("rounds float32 to bf16 to nearest even: ties both ways, max finite, overflow to inf, NaN, inf, subnormals", () => {
    const gpt: GptConfig = { vocab: 8, hidden: 4, heads: 1, kvHeads: 1, layers: 1, mlp: "gelu", mlpRatio: 1, maxSeq: 8, tiedHead: true };
    const params = new ParameterStore(gptParamSpecs(gpt));
    // float32 bits -> the bf16 bits round-to-nearest-even gives (worked out by hand)
    const cases: [number, number][] = [
      [0x3f808000, 0x3f80], // 1 + 2^-8: the tie between 1 (even) and 1 + 2^-7 -> down
      [0x3f818000, 0x3f82], // 1 + 3 * 2^-8: the tie between 0x3f81 and 0x3f82 (even) -> up
      [0x3f808001, 0x3f81], // just above the tie -> up
      [0x3f817fff, 0x3f81], // just below the tie -> down
      [0xbf808000, 0xbf80], // -(1 + 2^-8) -> down in magnitude
      [0x7f7f0000, 0x7f7f], // the largest finite bf16 stays
      [0x7f7f7fff, 0x7f7f], // below its tie with inf: stays finite
      [0x7f7f8000, 0x7f80], // the tie with inf: 0x7f7f is odd -> inf
      [0x7f7fffff, 0x7f80], // float32's max finite overflows to inf
      [0xff7fffff, 0xff80], // and to -inf
      [0x7f800000, 0x7f80], // inf
      [0xff800000, 0xff80], // -inf
      [0x00010000, 0x0001], // 2^-133, the smallest bf16 subnormal
      [0x00008000, 0x0000], // half of it: a tie -> 0 (even)
      [0x00018000, 0x0002], // 1.5 of it: a tie -> 2 (even)
      [0x00008001, 0x0001], // just above half -> the smallest subnormal
      [0x007fffff, 0x0080], // float32's largest subnormal rounds up to the smallest normal bf16
      [0x80000000, 0x8000], // -0
    ];
    const embed = new Uint32Array(params.value("embed.weight").data.buffer, params.value("embed.weight").data.byteOffset, 32);
    const norm = new Uint32Array(params.value("norm.gamma").data.buffer, params.value("norm.gamma").data.byteOffset, 4);
    const slots = [...embed.keys()].map((i) => [embed, i] as const).concat([...norm.keys()].map((i) => [norm, i] as const));
    cases.forEach(([bits], i) => {
      const [array, at] = slots[i]!;
      array[at] = bits;
    });
    // NaNs: quiet, signalling (would round to inf if treated as a number), negative
    const nans = [0x7fc00000, 0x7f800001, 0xffc00001];
    nans.forEach((bits, i) => {
      const [array, at] = slots[cases.length + i]!;
      array[at] = bits;
    });
    const target = path.join(tmp(), "hf");
    exportHfDirectory(target, params, gpt, gptFamily, gptFamily.configTo(gpt), { dtype: "bfloat16" });
    const t = readSafetensors(path.join(target, "model.safetensors")).tensors;
    const outEmbed = t.get("embed.weight")!.data as Uint16Array;
    const outNorm = t.get("norm.gamma")!.data as Uint16Array;
    const out = [...outEmbed, ...outNorm];
    cases.forEach(([bits, expected], i) => expect(out[i], `0x${bits.toString(16)}`).toBe(expected));
    nans.forEach((bits, i) => {
      const b = out[cases.length + i]!;
      expect((b & 0x7f80) === 0x7f80 && (b & 0x7f) !== 0, `NaN 0x${bits.toString(16)} -> 0x${b.toString(16)}`).toBe(true);
      expect(b >>> 15, "sign").toBe(bits >>> 31);
    });
  });

  it("the gpt family: config.json round trip, unknown keys refused by name, and an exported directory importable by model_type", () => {
    const gpt: GptConfig = {
      vocab: 12,
      hidden: 8,
      heads: 2,
      kvHeads: 1,
      layers: 2,
      mlp: "swiglu",
      mlpRatio: 1.5,
      mlpHidden: 12,
      maxSeq: 16,
      tiedHead: false,
      norm: "rmsnorm",
      eps: 1e-6,
      ropeBase: 5e5,
    };
    const json = gptFamily.configTo(gpt);
    expect(gptFamily.configFrom(JSON.parse(JSON.stringify(json)), "c.json")).toEqual(gpt);
    expect(() => gptFamily.configFrom({ ...json, rope_theory: { rope_type: "yarn" } }, "/x/config.json")).toThrow(
      /config '\/x\/config\.json': rope_theory is not a key of a ulysses_gpt config/,
    );
    const { num_hidden_layers: _, ...missing } = json;
    expect(() => gptFamily.configFrom(missing, "/x/config.json")).toThrow(/config '\/x\/config\.json': num_hidden_layers is missing/);
    expect(() => gptFamily.configFrom({ ...json, mlp: "relu" }, "/x/config.json")).toThrow(/config '\/x\/config\.json': mlp "relu" is not a registered MLP/);
    const params = new ParameterStore(gptParamSpecs(gpt));
    params.initialise(3);
    const target = path.join(tmp(), "hf");
    exportHfDirectory(target, params, gpt, gptFamily, json, { dtype: "float32" });
    const read = JSON.parse(fs.readFileSync(path.join(target, "config.json"), "utf8"));
    const family = modelFamilyOf(read, "config.json");
    expect(family.name).toBe("gpt");
    const again = new ParameterStore(gptParamSpecs(family.configFrom(read, "config.json")));
    importWeights(target, gpt, family, again);
    expect(again.values).toEqual(params.values);
    // [hidden, vocab] ours, [vocab, hidden] stored
    expect(readSafetensorsHeader(path.join(target, "model.safetensors")).entries.find((e) => e.name === "head.w")!.shape).toEqual([12, 8]);
  });

  it("replaces an existing directory only once the new one is complete, and leaves nothing behind on failure", () => {
    const gpt: GptConfig = { vocab: 4, hidden: 4, heads: 1, kvHeads: 1, layers: 1, mlp: "gelu", mlpRatio: 1, maxSeq: 8, tiedHead: true };
    const params = new ParameterStore(gptParamSpecs(gpt));
    const parent = tmp();
    const target = path.join(parent, "hf");
    exportHfDirectory(target, params, gpt, gptFamily, gptFamily.configTo(gpt), { dtype: "float32" });
    fs.writeFileSync(path.join(target, "stale.txt"), "old");
    const badSource = tmp();
    fs.mkdirSync(path.join(badSource, "tokenizer.json"));
    expect(() => exportHfDirectory(target, params, gpt, gptFamily, gptFamily.configTo(gpt), { dtype: "bfloat16", tokenizerFrom: badSource })).toThrow(
      /tokenizer file '.*tokenizer\.json' is a directory; only a regular file is copied/,
    );
    // a config.json that describes another model is refused before anything is written
    expect(() => exportHfDirectory(target, params, gpt, gptFamily, { ...gptFamily.configTo(gpt), num_hidden_layers: 2 })).toThrow(
      /exportHfDirectory: the config\.json given describes layers 2, the model has 1/,
    );
    // the old directory is untouched, and no temporary directory is left
    expect(fs.readdirSync(parent)).toEqual(["hf"]);
    expect(fs.readFileSync(path.join(target, "stale.txt"), "utf8")).toBe("old");
    expect(JSON.parse(fs.readFileSync(path.join(target, "config.json"), "utf8")).torch_dtype).toBe("float32");
    exportHfDirectory(target, params, gpt, gptFamily, gptFamily.configTo(gpt), { dtype: "bfloat16" });
    expect(fs.readdirSync(parent)).toEqual(["hf"]);
    expect(fs.readdirSync(target).sort()).toEqual(["config.json", "model.safetensors"]);
  });
});
