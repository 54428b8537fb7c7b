/**
 * Export of a trained GPT as a plain, single-device ONNX inference graph
 * (standard opset-17 operators only) that any ONNX Runtime runs on its own:
 * input `ids` int64 [batch, seq] (seq <= maxSeq), output `logits` float32
 * [batch, seq, vocab]. It restates the block's math with standard ops:
 * pre-norm blocks, RoPE (rotate-half, angles from the tables computed here in
 * float64), causal attention as MatMul + additive mask + Softmax, GQA by
 * repeating key/value heads, GELU (tanh) or SwiGLU, final norm, LM head.
 * Weights are stored as initializers.
 */
import { GraphBuilder, attr, type Value } from "@ulysses/kernels";
import { blockConfigOf, gptParamSpecs, type GptConfig } from "./gpt-config.js";
import { ModelError } from "./errors.js";
import { writeFileAtomic } from "./atomic-write.js";

const NORM_EPS = 1e-5;
const ROPE_BASE = 10000;
const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_K = 0.044715;

/** Encodes the model as ONNX bytes; `weights` is the flat parameter vector. */
export function buildOnnxModel(config: GptConfig, weights: Float32Array): Uint8Array {
  const specs = gptParamSpecs(config);
  const block = blockConfigOf(config);
  const { hidden, heads, kvHeads, headDim } = block;
  const total = specs.reduce((n, s) => n + s.shape.reduce((a, b) => a * b, 1), 0);
  if (weights.length !== total) throw new ModelError(`export: ${weights.length} weights given, the model has ${total}`);
  const g = new GraphBuilder("ulysses-gpt");
  const w = new Map<string, Value>();
  const raw = new Map<string, Float32Array>();
  let offset = 0;
  for (const spec of specs) {
    const size = spec.shape.reduce((a, b) => a * b, 1);
    const values = weights.subarray(offset, offset + size);
    raw.set(spec.name, values);
    w.set(spec.name, g.constant(values, spec.shape, "float32", spec.name.replace(/\./g, "_")));
    offset += size;
  }
  const weight = (name: string) => w.get(name)!;

  const ids = g.input("ids", "int64", ["batch", "seq"]);
  // seq as a 1-element int64 tensor
  const seqLen = g.op("Slice", [g.op("Shape", [ids]), g.int64s([1]), g.int64s([2])]);

  // RoPE tables [maxSeq, headDim] (cos/sin of pair i repeated for i + D/2), sliced to [seq, D]
  const half = headDim / 2;
  const cosTable = new Float32Array(config.maxSeq * headDim);
  const sinTable = new Float32Array(config.maxSeq * headDim);
  for (let p = 0; p < config.maxSeq; p++) {
    for (let i = 0; i < half; i++) {
      const angle = p * Math.pow(ROPE_BASE, (-2 * i) / headDim);
      cosTable[p * headDim + i] = cosTable[p * headDim + i + half] = Math.cos(angle);
      sinTable[p * headDim + i] = sinTable[p * headDim + i + half] = Math.sin(angle);
    }
  }
  const zero = g.int64s([0]);
  const cos = g.op("Slice", [g.constant(cosTable, [config.maxSeq, headDim], "float32", "rope_cos"), zero, seqLen, zero]);
  const sin = g.op("Slice", [g.constant(sinTable, [config.maxSeq, headDim], "float32", "rope_sin"), zero, seqLen, zero]);

  // causal mask [seq, seq]: 0 where key <= query, -1e9 above the diagonal
  const positions = g.op("Range", [g.constant([0], [], "int64"), g.op("Squeeze", [seqLen, zero]), g.constant([1], [], "int64")]);
  const rowsPos = g.op("Unsqueeze", [positions, g.int64s([1])]); // [seq, 1]
  const colsPos = g.op("Unsqueeze", [positions, zero]); // [1, seq]
  const mask = g.op("Where", [g.op("Greater", [colsPos, rowsPos]), g.scalar(-1e9), g.scalar(0)]);

  const norm = (x: Value, prefix: string): Value => {
    if (block.norm === "rmsnorm") {
      const meanSquare = g.op("ReduceMean", [g.op("Mul", [x, x])], { axes: attr.ints([-1]), keepdims: attr.int(1) });
      const rstd = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [meanSquare, g.scalar(NORM_EPS)])])]);
      return g.op("Mul", [g.op("Mul", [x, rstd]), weight(`${prefix}.gamma`)]);
    }
    return g.op("LayerNormalization", [x, weight(`${prefix}.gamma`), weight(`${prefix}.beta`)], { axis: attr.int(-1), epsilon: attr.float(NORM_EPS) });
  };
  /** [b, s, n*D] -> [b, n, s, D], rotated when `rotate` */
  const toHeads = (x: Value, n: number, rotate: boolean): Value => {
    // [b, s, n*D] -> [b, s, n, D] -> [b, n, s, D]
    const t = g.op("Transpose", [g.op("Reshape", [x, g.int64s([0, 0, n, headDim])])], { perm: attr.ints([0, 2, 1, 3]) });
    if (!rotate) return t;
    const [x1, x2] = g.ops("Split", [t, g.int64s([half, half])], { axis: attr.int(-1) }, { outputs: 2 });
    const rotated = g.op("Concat", [g.op("Neg", [x2!]), x1!], { axis: attr.int(-1) });
    return g.op("Add", [g.op("Mul", [t, cos]), g.op("Mul", [rotated, sin])]);
  };
  /** [b, kv, s, D] -> [b, H, s, D]: kv head j serves q heads j*g .. j*g + g - 1 */
  const repeatKv = (x: Value): Value => {
    if (kvHeads === heads) return x;
    const group = heads / kvHeads;
    // [b, kv, s, D] -> [b, kv, 1, s, D] -> [b, kv, g, s, D] -> [b, H, s, D]
    const shape5 = g.op("Concat", [g.op("Slice", [g.op("Shape", [x]), zero, g.int64s([2])]), g.int64s([group]), g.op("Slice", [g.op("Shape", [x]), g.int64s([2]), g.int64s([4])])], { axis: attr.int(0) });
    const expanded = g.op("Expand", [g.op("Unsqueeze", [x, g.int64s([2])]), shape5]);
    return g.op("Reshape", [expanded, g.int64s([0, heads, -1, headDim])]);
  };

  let x = g.op("Gather", [weight("embed.weight"), ids], { axis: attr.int(0) }); // [b, s, hidden]
  for (let layer = 0; layer < config.layers; layer++) {
    const p = `blocks.${layer}`;
    const h1 = norm(x, `${p}.norm1`);
    const q = toHeads(g.op("MatMul", [h1, weight(`${p}.attn.q.w`)]), heads, true);
    const k = repeatKv(toHeads(g.op("MatMul", [h1, weight(`${p}.attn.k.w`)]), kvHeads, true));
    const v = repeatKv(toHeads(g.op("MatMul", [h1, weight(`${p}.attn.v.w`)]), kvHeads, false));
    // scores [b, H, s, s]
    const scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], { perm: attr.ints([0, 1, 3, 2]) })]), g.scalar(1 / Math.sqrt(headDim))]), mask]);
    const probs = g.op("Softmax", [scores], { axis: attr.int(-1) });
    // [b, H, s, D] -> [b, s, H, D] -> [b, s, H*D]
    const o = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, v])], { perm: attr.ints([0, 2, 1, 3]) }), g.int64s([0, 0, heads * headDim])]);
    const x2 = g.op("Add", [x, g.op("MatMul", [o, weight(`${p}.attn.o.w`)])]);
    const h2 = norm(x2, `${p}.norm2`);
    let act: Value;
    if (block.mlp === "swiglu") {
      const gate = g.op("MatMul", [h2, weight(`${p}.mlp.gate.w`)]);
      act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), g.op("MatMul", [h2, weight(`${p}.mlp.up.w`)])]);
    } else {
      const up = g.op("MatMul", [h2, weight(`${p}.mlp.up.w`)]);
      const cube = g.op("Mul", [g.op("Mul", [up, up]), up]);
      const inner = g.op("Mul", [g.scalar(GELU_C), g.op("Add", [up, g.op("Mul", [g.scalar(GELU_K), cube])])]);
      act = g.op("Mul", [g.op("Mul", [g.scalar(0.5), up]), g.op("Add", [g.scalar(1), g.op("Tanh", [inner])])]);
    }
    x = g.op("Add", [x2, g.op("MatMul", [act, weight(`${p}.mlp.down.w`)])]);
  }
  const hFinal = norm(x, "norm");
  let head: Value;
  if (config.tiedHead) {
    // [vocab, hidden] -> [hidden, vocab], transposed here so the graph holds a plain matrix
    const e = raw.get("embed.weight")!;
    const t = new Float32Array(hidden * config.vocab);
    for (let r = 0; r < config.vocab; r++) for (let c = 0; c < hidden; c++) t[c * config.vocab + r] = e[r * hidden + c]!;
    head = g.constant(t, [hidden, config.vocab], "float32", "head_w");
  } else {
    head = weight("head.w");
  }
  g.output(g.op("MatMul", [hFinal, head]), "logits", "float32", ["batch", "seq", config.vocab]);
  return g.encode();
}

/** Writes the ONNX model to `file` atomically. */
export function exportOnnx(file: string, config: GptConfig, weights: Float32Array): void {
  writeFileAtomic(file, buildOnnxModel(config, weights));
}
