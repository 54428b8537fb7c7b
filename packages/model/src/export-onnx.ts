/**
 * Export of a trained GPT as a plain, single-device ONNX inference graph
 * that ONNX Runtime runs on its own: input `ids` int64 [batch, seq]
 * (seq <= maxSeq), output `logits` float32 [batch, seq, vocab]. The graph is
 * the model's own definition, `gptForward` and the block's `blockForward`,
 * run on graph values instead of tensors: this file only says how each
 * operation of that definition is written as ONNX nodes (the same operators
 * the training kernels run: LayerNormalization or
 * SimplifiedLayerNormalization (also Qwen3's per-head q/k norm), Gelu with the
 * tanh approximation, RoPE as rotate-half with float64 angle tables, the
 * config's RoPE scaling included, causal attention as MatMul + additive mask +
 * Softmax with key/value heads repeated for GQA).
 * Weights are stored as initializers.
 */
import { blockForward, hasBias, mlpComponent, normComponent, type BlockMath, type ResolvedBlockConfig } from "@ulysses/block";
import { GraphBuilder, attr, ropeTables, type Value } from "@ulysses/kernels";
import { writeFileAtomic } from "./atomic-write.js";
import { ModelError } from "./errors.js";
import { gptForward, type GptMath } from "./gpt-forward.js";
import { blockConfigOf, gptParamSpecs, type GptConfig } from "./gpt-config.js";

/** Gelu's tanh approximation needs opset 20. */
const OPSET = 20;

/** The shared pieces of the graph: inputs, RoPE tables, the causal mask. */
interface GraphInputs {
  g: GraphBuilder;
  config: ResolvedBlockConfig;
  weight: (name: string) => Value;
  /** [seq, 1, D] */
  cos: Value;
  sin: Value;
  /** [seq, seq]: 0 where key <= query, -1e9 above the diagonal */
  mask: Value;
}

/** The config's norm of x over its last axis, its weights `${prefix}.${suffix}` (a norm without ONNX nodes is refused). */
function norm(g: GraphBuilder, config: ResolvedBlockConfig, x: Value, weight: (name: string) => Value, prefix: string): Value {
  const component = normComponent(config.norm);
  if (component.onnx === undefined)
    throw new ModelError(`ONNX export: the norm '${component.name}' has no ONNX form (NormComponent.onnx); export with another norm`);
  return component.onnx(g, x, (suffix) => weight(`${prefix}.${suffix}`), config.eps);
}

/** The block's operations as ONNX nodes on [b, s, features] values. */
function blockMath(inputs: GraphInputs, layer: number): BlockMath<Value> {
  const { g, config, weight, cos, sin, mask } = inputs;
  const { heads, kvHeads, headDim } = config;
  const half = headDim / 2;
  const w = (name: string) => weight(`blocks.${layer}.${name}`);
  /** [b, kv, s, D] -> [b, H, s, D]: kv head j serves q heads j*g .. j*g + g - 1 */
  const repeatKv = (x: Value): Value => {
    if (kvHeads === heads) return x;
    const group = heads / kvHeads;
    const zero = g.int64s([0]);
    // [b, kv, s, D] -> [b, kv, 1, s, D] -> [b, kv, g, s, D] -> [b, H, s, D]
    const shape5 = g.op(
      "Concat",
      [g.op("Slice", [g.op("Shape", [x]), zero, g.int64s([2])]), g.int64s([group]), g.op("Slice", [g.op("Shape", [x]), g.int64s([2]), g.int64s([4])])],
      { axis: attr.int(0) },
    );
    return g.op("Reshape", [g.op("Expand", [g.op("Unsqueeze", [x, g.int64s([2])]), shape5]), g.int64s([0, heads, -1, headDim])]);
  };
  return {
    norm: async (x, name) => norm(g, config, x, w, name),
    linear: async (x, name) => {
      const y = g.op("MatMul", [x, w(`${name}.w`)]);
      return hasBias(config, name) ? g.op("Add", [y, w(`${name}.b`)]) : y;
    },
    // qkNorm: RMSNorm over the last axis of [b, s, n, D], its gain [D] shared by the heads
    headNorm: async (x, name) => normComponent("rmsnorm").onnx!(g, x, (suffix) => w(`${name}.${suffix}`), config.eps),
    // [b, s, n*D] -> [b, s, n, D]
    splitHeads: (x, n) => g.op("Reshape", [x, g.int64s([0, 0, n, headDim])]),
    // [b, s, n, D] -> [b, s, n*D]
    mergeHeads: (x) => g.op("Reshape", [x, g.int64s([0, 0, -1])]),
    rope: async (x) => {
      // y = x * cos + rotateHalf(x) * sin, rotateHalf([x1, x2]) = [-x2, x1]; tables [seq, 1, D] broadcast over batch and heads
      const [x1, x2] = g.ops("Split", [x, g.int64s([half, half])], { axis: attr.int(-1) }, { outputs: 2 });
      const rotated = g.op("Concat", [g.op("Neg", [x2!]), x1!], { axis: attr.int(-1) });
      return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])]);
    },
    attention: async (q, k, v) => {
      // [b, s, n, D] -> [b, n, s, D]
      const toHeads = (x: Value) => g.op("Transpose", [x], { perm: attr.ints([0, 2, 1, 3]) });
      const kh = repeatKv(toHeads(k));
      // scores [b, H, s, s]
      const scores = g.op("Add", [
        g.op("Mul", [g.op("MatMul", [toHeads(q), g.op("Transpose", [kh], { perm: attr.ints([0, 1, 3, 2]) })]), g.scalar(1 / Math.sqrt(headDim))]),
        mask,
      ]);
      const probs = g.op("Softmax", [scores], { axis: attr.int(-1) });
      // [b, H, s, D] -> [b, s, H, D]
      return toHeads(g.op("MatMul", [probs, repeatKv(toHeads(v))]));
    },
    residual: async (a, b) => g.op("Add", [a, b]),
    mlpActivation: async (inputs) => {
      const component = mlpComponent(config.mlp);
      if (component.onnx === undefined)
        throw new ModelError(`ONNX export: the MLP '${component.name}' has no ONNX form (MlpComponent.onnx); export with another MLP`);
      return component.onnx(g, inputs);
    },
  };
}

/** Encodes the model as ONNX bytes; `weights` is the flat parameter vector. */
export async function buildOnnxModel(config: GptConfig, weights: Float32Array): Promise<Uint8Array> {
  const specs = gptParamSpecs(config);
  const block = blockConfigOf(config);
  const { hidden, headDim, ropeBase, ropeScaling } = block;
  const total = specs.reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
  if (weights.length !== total) throw new ModelError(`export: ${weights.length} weights given, the model has ${total}`);
  const g = new GraphBuilder("ulysses-gpt", { opset: OPSET });
  const values = new Map<string, Value>();
  const raw = new Map<string, Float32Array>();
  let offset = 0;
  for (const spec of specs) {
    const size = spec.shape.reduce((a, b) => a * b, 1);
    const data = weights.subarray(offset, offset + size);
    raw.set(spec.name, data);
    values.set(spec.name, g.constant(data, spec.shape, "float32", spec.name.replace(/\./g, "_")));
    offset += size;
  }
  const weight = (name: string) => values.get(name)!;

  const ids = g.input("ids", "int64", ["batch", "seq"]);
  // seq as a 1-element int64 tensor
  const seqLen = g.op("Slice", [g.op("Shape", [ids]), g.int64s([1]), g.int64s([2])]);
  // RoPE tables [maxSeq, 1, D] at positions 0 .. maxSeq - 1 (training's tables: the config's scaling, yarn's attention factor), sliced to [seq, 1, D]
  const { cos: cosTable, sin: sinTable } = ropeTables(
    Array.from({ length: config.maxSeq }, (_, p) => p),
    headDim,
    ropeBase,
    ropeScaling,
  );
  const zero = g.int64s([0]);
  const cos = g.op("Slice", [g.constant(cosTable, [config.maxSeq, 1, headDim], "float32", "rope_cos"), zero, seqLen, zero]);
  const sin = g.op("Slice", [g.constant(sinTable, [config.maxSeq, 1, headDim], "float32", "rope_sin"), zero, seqLen, zero]);
  const positions = g.op("Range", [g.constant([0], [], "int64"), g.op("Squeeze", [seqLen, zero]), g.constant([1], [], "int64")]);
  // [seq, 1] vs [1, seq]: -1e9 where the key comes after the query
  const mask = g.op("Where", [
    g.op("Greater", [g.op("Unsqueeze", [positions, zero]), g.op("Unsqueeze", [positions, g.int64s([1])])]),
    g.scalar(-1e9),
    g.scalar(0),
  ]);
  const inputs: GraphInputs = { g, config: block, weight, cos, sin, mask };

  const math: GptMath<Value> = {
    // [b, s] -> [b, s, hidden]
    embed: async () => g.op("Gather", [weight("embed.weight"), ids], { axis: attr.int(0) }),
    block: (layer, x) => blockForward(block, blockMath(inputs, layer), x),
    norm: async (x) => norm(g, block, x, weight, "norm"),
    head: async (x) => {
      if (!config.tiedHead) return g.op("MatMul", [x, weight("head.w")]);
      // [vocab, hidden] -> [hidden, vocab], transposed here so the graph holds a plain matrix
      const e = raw.get("embed.weight")!;
      const t = new Float32Array(hidden * config.vocab);
      for (let r = 0; r < config.vocab; r++) for (let c = 0; c < hidden; c++) t[c * config.vocab + r] = e[r * hidden + c]!;
      return g.op("MatMul", [x, g.constant(t, [hidden, config.vocab], "float32", "head_w")]);
    },
  };
  g.output(await gptForward(config, math), "logits", "float32", ["batch", "seq", config.vocab]);
  return g.encode();
}

/** Writes the ONNX model to `file` atomically. */
export async function exportOnnx(file: string, config: GptConfig, weights: Float32Array): Promise<void> {
  writeFileAtomic(file, await buildOnnxModel(config, weights));
}
