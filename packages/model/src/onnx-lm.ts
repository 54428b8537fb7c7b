/**
 * A model.onnx of exportOnnx (input `ids` [1, n] int64, output `logits`
 * [1, n, vocab]) run by onnxruntime-node alone, for decoding: the logits of a
 * window of at most maxSeq tokens, the next token's, and a sampling loop.
 * Every failure names the model's source.
 */
import * as ort from "onnxruntime-node";
import { ModelError } from "./errors.js";
import type { GptConfig } from "./gpt-config.js";
import { sampleToken, type SamplingOptions } from "./sampling.js";

export class OnnxLM {
  private constructor(
    private readonly session: ort.InferenceSession,
    readonly config: GptConfig,
    readonly source: string,
  ) {}

  /** Loads `bytes` (a model.onnx) for a model of `config`; `source` names it in messages. */
  static async create(bytes: Uint8Array, config: GptConfig, source: string): Promise<OnnxLM> {
    try {
      return new OnnxLM(await ort.InferenceSession.create(bytes, { intraOpNumThreads: 1, logSeverityLevel: 3 }), config, source);
    } catch (cause) {
      throw new ModelError(`model file '${source}' cannot be loaded by ONNX Runtime: ${(cause as Error).message}`, { cause });
    }
  }

  /** Logits [positions, vocab] of the last maxSeq tokens of `ids`, row after row. */
  async logits(ids: readonly number[]): Promise<Float32Array> {
    const { maxSeq, vocab } = this.config;
    const window = ids.slice(-maxSeq);
    const input = new ort.Tensor(
      "int64",
      BigInt64Array.from(window, (v) => BigInt(v)),
      [1, window.length],
    );
    let logits: ort.Tensor | undefined;
    try {
      logits = (await this.session.run({ ids: input })).logits;
    } catch (cause) {
      throw new ModelError(`model '${this.source}' failed to run on ${window.length} tokens: ${(cause as Error).message}`, { cause });
    }
    if (logits === undefined || logits.dims.length !== 3 || logits.dims[2] !== vocab) {
      throw new ModelError(
        `model '${this.source}' gives logits [${logits?.dims.join(", ") ?? "none"}], expected [1, ${window.length}, ${vocab}] (the model config's vocab)`,
      );
    }
    return logits.data as Float32Array;
  }

  /** Samples `count` tokens after `ids`, each from the logits of everything before it (the last maxSeq tokens). */
  async *generate(ids: readonly number[], count: number, sampling: SamplingOptions, uniform: () => number): AsyncGenerator<number> {
    const context = [...ids];
    for (let i = 0; i < count; i++) {
      const logits = await this.logits(context);
      const token = sampleToken(logits.subarray(logits.length - this.config.vocab), sampling, uniform);
      context.push(token);
      yield token;
    }
  }

  async release(): Promise<void> {
    await this.session.release();
  }
}
