/**
 * config.json's rope_scaling: Llama 3.1's, a linear one and Qwen's yarn read
 * into the model's RopeScaling (under rope_type or the older type; yarn's
 * defaults: the context from max_position_embeddings, betas 32 and 1, the
 * attention factor 0.1 ln(factor) + 1, truncate), null or absent as none;
 * DeepSeek's yarn keys, dynamic, unknown types, unknown keys, missing or
 * malformed fields refused with the file and key; transformers 5's
 * rope_parameters read when plain.
 */
import { describe, expect, it } from "vitest";
import { blockConfigOf, validateGptConfig, type GptConfig } from "../gpt-config.js";
import { llamaFamily } from "./llama.js";
import { ropeScalingFrom } from "./rope-scaling.js";

const llama31 = { factor: 8.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: "llama3" };
const at = (rope_scaling: unknown) => ({ rope_scaling });

describe("ropeScalingFrom", () => {
  it("reads llama3 and linear (rope_type or type), and none for null, absent or default", () => {
    expect(ropeScalingFrom(at(llama31), "c.json")).toEqual({ type: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 });
    expect(ropeScalingFrom(at({ type: "linear", factor: 2 }), "c.json")).toEqual({ type: "linear", factor: 2 });
    expect(ropeScalingFrom(at({ type: "linear", rope_type: "linear", factor: 2 }), "c.json")).toEqual({ type: "linear", factor: 2 });
    expect(ropeScalingFrom(at(null), "c.json")).toBeUndefined();
    expect(ropeScalingFrom({}, "c.json")).toBeUndefined();
    expect(ropeScalingFrom(at({ rope_type: "default" }), "c.json")).toBeUndefined();
  });

  it("reads yarn as Qwen's model cards write it, its optional keys, and its defaults", () => {
    const qwen = { rope_type: "yarn", factor: 4.0, original_max_position_embeddings: 32768 };
    expect(ropeScalingFrom(at(qwen), "c.json")).toEqual({
      type: "yarn",
      factor: 4,
      originalMaxPositions: 32768,
      betaFast: 32,
      betaSlow: 1,
      attentionFactor: 0.1 * Math.log(4) + 1,
      truncate: true,
    });
    expect(ropeScalingFrom({ max_position_embeddings: 4096, rope_scaling: { type: "yarn", factor: 0.5 } }, "c.json")).toEqual({
      type: "yarn",
      factor: 0.5,
      originalMaxPositions: 4096,
      betaFast: 32,
      betaSlow: 1,
      attentionFactor: 1,
      truncate: true,
    });
    const all = { ...qwen, beta_fast: 16, beta_slow: 2, attention_factor: 1.5, truncate: false };
    expect(ropeScalingFrom(at(all), "c.json")).toEqual({
      type: "yarn",
      factor: 4,
      originalMaxPositions: 32768,
      betaFast: 16,
      betaSlow: 2,
      attentionFactor: 1.5,
      truncate: false,
    });
    // null for an optional key is its default
    expect(ropeScalingFrom(at({ ...qwen, beta_fast: null, attention_factor: null }), "c.json")).toEqual(ropeScalingFrom(at(qwen), "c.json"));
  });

  it("refuses what it does not read, naming the file, the key and the value", () => {
    const cases: [unknown, string | RegExp][] = [
      [
        { type: "yarn", factor: 40, original_max_position_embeddings: 4096, mscale: 1, mscale_all_dim: 1 },
        /^config 'm\/config.json': rope_scaling.mscale is not supported: DeepSeek's YaRN variant/,
      ],
      [{ type: "yarn", factor: 4 }, "config 'm/config.json': rope_scaling.original_max_position_embeddings is missing, and so is max_position_embeddings"],
      [
        { type: "yarn", factor: 4, original_max_position_embeddings: 0 },
        "config 'm/config.json': rope_scaling.original_max_position_embeddings must be a number > 0, got 0",
      ],
      [
        { type: "yarn", factor: 4, original_max_position_embeddings: 512, beta_fast: 1 },
        "config 'm/config.json': rope_scaling.beta_fast 1 must be greater than rope_scaling.beta_slow 1",
      ],
      [
        { type: "yarn", factor: 4, original_max_position_embeddings: 512, truncate: "yes" },
        "config 'm/config.json': rope_scaling.truncate must be true or false, got \"yes\"",
      ],
      [
        { type: "yarn", factor: 4, original_max_position_embeddings: 512, extrapolation_factor: 1 },
        /^config 'm\/config.json': rope_scaling.extrapolation_factor is not a key of a yarn RoPE scaling/,
      ],
      [{ rope_type: "dynamic", factor: 2 }, /^config 'm\/config.json': rope_scaling.rope_type "dynamic" is not supported: dynamic NTK/],
      [{ rope_type: "longrope", factor: 2 }, /^config 'm\/config.json': rope_scaling.rope_type "longrope" is not supported: LongRoPE/],
      [
        { rope_type: "su", factor: 2 },
        "config 'm/config.json': rope_scaling.rope_type \"su\" is not supported: the RoPE scalings read are default, linear, llama3, yarn",
      ],
      [{ rope_type: "constructor" }, /^config 'm\/config.json': rope_scaling.rope_type "constructor" is not supported: the RoPE scalings read are/],
      [{ factor: 2 }, "config 'm/config.json': rope_scaling.type must be a string, got undefined"],
      [{ rope_type: 3 }, "config 'm/config.json': rope_scaling.rope_type must be a string, got 3"],
      [
        { rope_type: "linear", type: "llama3", factor: 2 },
        'config \'m/config.json\': rope_scaling.type "llama3" disagrees with rope_scaling.rope_type "linear"',
      ],
      [{ type: "linear" }, "config 'm/config.json': rope_scaling.factor must be a number > 0, got nothing (the key is missing)"],
      [{ type: "linear", factor: "2" }, "config 'm/config.json': rope_scaling.factor must be a number > 0, got \"2\""],
      [{ type: "linear", factor: 0 }, "config 'm/config.json': rope_scaling.factor must be a number > 0, got 0"],
      [
        { type: "linear", factor: 2, original_max_position_embeddings: 4096 },
        "config 'm/config.json': rope_scaling.original_max_position_embeddings is not a key of a linear RoPE scaling (its keys: type, factor)",
      ],
      [{ rope_type: "default", factor: 2 }, /^config 'm\/config.json': rope_scaling.factor is not a key of a default RoPE scaling/],
      [{ ...llama31, low_freq_factor: undefined }, "config 'm/config.json': rope_scaling.low_freq_factor must be a number > 0, got undefined"],
      [{ ...llama31, attention_factor: 1 }, /^config 'm\/config.json': rope_scaling.attention_factor is not a key of a llama3 RoPE scaling/],
      [{ ...llama31, high_freq_factor: 1 }, "config 'm/config.json': rope_scaling.high_freq_factor 1 must be greater than rope_scaling.low_freq_factor 1"],
      [
        { ...llama31, original_max_position_embeddings: 8192.5 },
        "config 'm/config.json': rope_scaling.original_max_position_embeddings must be an integer from 1 to 2^31, got 8192.5",
      ],
      [
        { ...llama31, original_max_position_embeddings: 2 ** 40 },
        "config 'm/config.json': rope_scaling.original_max_position_embeddings must be an integer from 1 to 2^31, got 1099511627776",
      ],
      [[2], "config 'm/config.json': rope_scaling must be an object or null, got [2]"],
      ["linear", "config 'm/config.json': rope_scaling must be an object or null, got \"linear\""],
    ];
    for (const [scaling, message] of cases) expect(() => ropeScalingFrom(at(scaling), "m/config.json"), JSON.stringify(scaling)).toThrow(message);
  });
});

describe("the llama family with rope_scaling", () => {
  const llama = {
    model_type: "llama",
    hidden_size: 64,
    intermediate_size: 160,
    num_attention_heads: 4,
    num_hidden_layers: 1,
    vocab_size: 50,
    max_position_embeddings: 131072,
    rope_theta: 500000,
  };

  it("carries it into the GPT and block configs; the GPT config checks it strictly (as read back from a checkpoint)", () => {
    const config = llamaFamily.configFrom({ ...llama, rope_scaling: llama31 }, "c.json");
    expect(config.ropeScaling).toEqual({ type: "llama3", factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositions: 8192 });
    validateGptConfig(config);
    expect(blockConfigOf(config).ropeScaling).toEqual(config.ropeScaling);
    const roundTrip = JSON.parse(JSON.stringify(config)) as GptConfig;
    expect(blockConfigOf(roundTrip).ropeScaling).toEqual(config.ropeScaling);
    expect(llamaFamily.configFrom({ ...llama, rope_scaling: null }, "c.json").ropeScaling).toBeUndefined();
    expect(() => llamaFamily.configFrom({ ...llama, rope_scaling: { type: "dynamic", factor: 2 } }, "d/config.json")).toThrow(
      /^config 'd\/config.json': rope_scaling.type "dynamic" is not supported/,
    );
    const bad: [unknown, string][] = [
      [{ type: "linear", factor: 2, extra: 1 }, "GPT config: ropeScaling.extra is not a field of a linear RoPE scaling (fields: type, factor)"],
      [{ type: "dynamic", factor: 2 }, 'GPT config: ropeScaling.type must be one of "linear", "llama3", "yarn", got "dynamic"'],
      [{ ...config.ropeScaling, lowFreqFactor: "1" }, 'GPT config: ropeScaling.lowFreqFactor must be a finite number > 0, got "1"'],
      [{ type: "llama3", factor: 8 }, "GPT config: ropeScaling.lowFreqFactor must be a finite number > 0, got undefined"],
      ["linear", 'GPT config: ropeScaling must be an object or absent, got "linear"'],
    ];
    for (const [ropeScaling, message] of bad) expect(() => validateGptConfig({ ...config, ropeScaling } as GptConfig)).toThrow(message);
  });

  it("reads transformers 5's rope_parameters when it holds plain RoPE, and refuses scaling there or beside it by name", () => {
    const { rope_theta: _, ...plain } = llama;
    expect(llamaFamily.configFrom({ ...plain, rope_parameters: { rope_type: "default", rope_theta: 250000 } }, "c.json").ropeBase).toBe(250000);
    expect(() => llamaFamily.configFrom({ ...plain, rope_parameters: { rope_type: "llama3", factor: 8, rope_theta: 1e4 } }, "p/config.json")).toThrow(
      /^config 'p\/config.json': rope_parameters \{"rope_type":"llama3".* is not supported: only plain RoPE/,
    );
    expect(() =>
      llamaFamily.configFrom({ ...plain, rope_parameters: { rope_theta: 1e4 }, rope_scaling: { type: "linear", factor: 2 } }, "p/config.json"),
    ).toThrow(/^config 'p\/config.json': rope_scaling .* is not supported: rope_scaling beside rope_parameters/);
  });
});
