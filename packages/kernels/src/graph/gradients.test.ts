/**
 * Every registered gradient rule, checked the same way: a one- or two-op
 * float64 graph is differentiated through the registry and run by ONNX
 * Runtime, and the result is compared with central finite differences of the
 * forward graph (also float64 in ONNX Runtime), which never touch the rule.
 * Error norm: maxRelativeError (max abs difference over max abs expected).
 */
import { afterAll, describe, expect, it } from "vitest";
import { Tensor } from "@ulysses/tensors";
import { attr } from "./builder.js";
import { gradients, registeredGradients, registerGradient } from "./gradients.js";
import { Tape, type TapeValue } from "./gradients-tape.js";
import { SessionCache } from "../runtime/session-cache.js";
import { dot, maxRelativeError, randomTensor64, seededRandom } from "../reference/testing.js";

interface Case {
  op: string;
  name: string;
  inputs: Record<string, readonly number[]>;
  /** Inputs drawn from [0.5, 2) instead of [-1, 1). */
  positive?: string[];
  build: (t: Tape, x: Record<string, TapeValue>) => TapeValue;
}

const int = attr.int;
const CASES: Case[] = [
  { op: "Identity", name: "identity", inputs: { a: [3, 2] }, build: (t, { a }) => t.op("Identity", [a!]) },
  { op: "Neg", name: "neg", inputs: { a: [3, 2] }, build: (t, { a }) => t.op("Neg", [a!]) },
  { op: "Exp", name: "exp", inputs: { a: [3, 2] }, build: (t, { a }) => t.op("Exp", [a!]) },
  { op: "Log", name: "log", inputs: { a: [3, 2] }, positive: ["a"], build: (t, { a }) => t.op("Log", [a!]) },
  { op: "Tanh", name: "tanh", inputs: { a: [3, 2] }, build: (t, { a }) => t.op("Tanh", [a!]) },
  { op: "Sigmoid", name: "sigmoid", inputs: { a: [3, 2] }, build: (t, { a }) => t.op("Sigmoid", [a!]) },
  { op: "Sqrt", name: "sqrt", inputs: { a: [3, 2] }, positive: ["a"], build: (t, { a }) => t.op("Sqrt", [a!]) },
  { op: "Reciprocal", name: "reciprocal", inputs: { a: [3, 2] }, positive: ["a"], build: (t, { a }) => t.op("Reciprocal", [a!]) },
  { op: "Add", name: "add broadcast", inputs: { a: [2, 3, 4], b: [3, 1] }, build: (t, { a, b }) => t.op("Add", [a!, b!]) },
  { op: "Sub", name: "sub broadcast", inputs: { a: [4], b: [3, 4] }, build: (t, { a, b }) => t.op("Sub", [a!, b!]) },
  { op: "Mul", name: "mul broadcast", inputs: { a: [2, 3, 4], b: [1, 4] }, build: (t, { a, b }) => t.op("Mul", [a!, b!]) },
  { op: "Div", name: "div broadcast", inputs: { a: [3, 4], b: [3, 1] }, positive: ["b"], build: (t, { a, b }) => t.op("Div", [a!, b!]) },
  { op: "Pow", name: "pow -0.5", inputs: { a: [3, 2] }, positive: ["a"], build: (t, { a }) => t.op("Pow", [a!, t.scalar(-0.5, a!)]) },
  { op: "Pow", name: "pow 2", inputs: { a: [3, 2] }, build: (t, { a }) => t.op("Pow", [a!, t.scalar(2, a!)]) },
  { op: "MatMul", name: "matmul 2-D", inputs: { a: [3, 5], b: [5, 2] }, build: (t, { a, b }) => t.op("MatMul", [a!, b!]) },
  { op: "MatMul", name: "matmul batched x 2-D", inputs: { a: [2, 3, 4], b: [4, 3] }, build: (t, { a, b }) => t.op("MatMul", [a!, b!]) },
  { op: "MatMul", name: "matmul broadcast batch", inputs: { a: [2, 3, 4], b: [1, 4, 2] }, build: (t, { a, b }) => t.op("MatMul", [a!, b!]) },
  { op: "Gemm", name: "gemm + bias", inputs: { a: [3, 4], b: [4, 5], c: [5] }, build: (t, { a, b, c }) => t.op("Gemm", [a!, b!, c!]) },
  {
    op: "Gemm",
    name: "gemm transA transB",
    inputs: { a: [4, 3], b: [5, 4] },
    build: (t, { a, b }) => t.op("Gemm", [a!, b!], { transA: int(1), transB: int(1) }),
  },
  { op: "Gemm", name: "gemm transB", inputs: { a: [3, 4], b: [5, 4], c: [3, 1] }, build: (t, { a, b, c }) => t.op("Gemm", [a!, b!, c!], { transB: int(1) }) },
  {
    op: "ReduceSum",
    name: "reduceSum keepdims 0",
    inputs: { a: [2, 3, 4] },
    build: (t, { a }) => t.op("ReduceSum", [a!, t.int64s([0, 2])], { keepdims: int(0) }),
  },
  {
    op: "ReduceMean",
    name: "reduceMean keepdims 1",
    inputs: { a: [2, 3, 4] },
    build: (t, { a }) => t.op("ReduceMean", [a!, t.int64s([-1])], { keepdims: int(1) }),
  },
  {
    op: "LayerNormalization",
    name: "layerNorm",
    inputs: { x: [3, 5], g: [5], b: [5] },
    build: (t, { x, g, b }) => t.ops("LayerNormalization", [x!, g!, b!], { axis: int(-1), epsilon: attr.float(1e-5) })[0]!,
  },
  {
    op: "SimplifiedLayerNormalization",
    name: "rmsNorm",
    inputs: { x: [3, 5], g: [5] },
    build: (t, { x, g }) => t.ops("SimplifiedLayerNormalization", [x!, g!], { axis: int(-1), epsilon: attr.float(1e-5) })[0]!,
  },
  { op: "Gelu", name: "gelu (tanh)", inputs: { a: [7] }, build: (t, { a }) => t.op("Gelu", [a!], { approximate: attr.string("tanh") }) },
  { op: "Split", name: "split (one part unused)", inputs: { a: [2, 6] }, build: (t, { a }) => t.ops("Split", [a!, t.int64s([2, 1, 3])], { axis: int(1) })[2]! },
  { op: "Concat", name: "concat", inputs: { a: [2, 1], b: [2, 3] }, build: (t, { a, b }) => t.op("Concat", [a!, b!], { axis: int(-1) }) },
  { op: "Reshape", name: "reshape", inputs: { a: [2, 6] }, build: (t, { a }) => t.op("Reshape", [a!, t.int64s([3, -1])]) },
  { op: "Transpose", name: "transpose", inputs: { a: [2, 3, 4] }, build: (t, { a }) => t.op("Transpose", [a!], { perm: attr.ints([1, 2, 0]) }) },
  {
    op: "Mul",
    name: "shared input accumulates (a * tanh(a))",
    inputs: { a: [4] },
    build: (t, { a }) => t.op("Mul", [a!, t.op("Tanh", [a!])]),
  },
];

const cache = new SessionCache({ intraOpThreads: 1 });
afterAll(() => cache.release());
const random = seededRandom(99);

function tapeFor(c: Case): { t: Tape; xs: Record<string, TapeValue>; y: TapeValue } {
  const t = new Tape(c.name);
  const xs: Record<string, TapeValue> = {};
  for (const [name, dims] of Object.entries(c.inputs)) xs[name] = t.input(name, "float64", dims);
  return { t, xs, y: c.build(t, xs) };
}

describe("gradient rules vs finite differences (float64 in ONNX Runtime)", () => {
  for (const c of CASES) {
    it(`${c.op}: ${c.name}`, async () => {
      const feeds: Record<string, Tensor<"float64">> = {};
      for (const [name, dims] of Object.entries(c.inputs)) {
        feeds[name] = randomTensor64(dims, random);
        if (c.positive?.includes(name))
          feeds[name] = new Tensor(
            "float64",
            dims,
            feeds[name].data.map((v) => 1.25 + 0.75 * v),
          );
      }
      const forward = () => {
        const { t, y } = tapeFor(c);
        t.output(y, "y");
        return t.encode();
      };
      const backward = () => {
        const { t, xs, y } = tapeFor(c);
        const names = Object.keys(xs);
        const grads = gradients(
          t,
          [y],
          [t.input("dy", "float64", y.dims)],
          names.map((n) => xs[n]!),
        );
        grads.forEach((g, i) => t.output(g, `d_${names[i]}`));
        return t.encode();
      };
      const { y } = await cache.run(`fwd ${c.name}`, forward, feeds);
      const probe = randomTensor64(y!.shape, random);
      const analytic = await cache.run(`bwd ${c.name}`, backward, { ...feeds, dy: probe });
      const step = 1e-6;
      for (const [name, x] of Object.entries(feeds)) {
        const numeric = new Tensor("float64", x.shape);
        for (let i = 0; i < x.size; i++) {
          const saved = x.data[i]!;
          x.data[i] = saved + step;
          const plus = dot((await cache.run(`fwd ${c.name}`, forward, feeds)).y as Tensor<"float64">, probe);
          x.data[i] = saved - step;
          const minus = dot((await cache.run(`fwd ${c.name}`, forward, feeds)).y as Tensor<"float64">, probe);
          x.data[i] = saved;
          numeric.data[i] = (plus - minus) / (2 * step);
        }
        expect(maxRelativeError(analytic[`d_${name}`] as Tensor<"float64">, numeric), `d_${name}`).toBeLessThan(1e-6);
      }
    });
  }

  it("covers every registered rule", () => {
    const tested = new Set(CASES.map((c) => c.op));
    expect(registeredGradients().filter((op) => !tested.has(op))).toEqual([]);
  });
});

describe("tape and registry", () => {
  it("emits only the nodes the outputs need, honouring bindings", () => {
    const t = new Tape("bind");
    const x = t.input("x", "float32", [2, 3]);
    const saved = t.input("saved", "float32", [2, 1]);
    const r = t.op("ReduceSum", [t.op("Exp", [x]), t.int64s([1])], { keepdims: int(1) });
    t.bind(r, saved);
    t.output(t.op("Mul", [x, r]), "y");
    const ops = (t.encode() as Uint8Array).length;
    expect(ops).toBeGreaterThan(0);
    const encoded = Buffer.from(t.encode()).toString("latin1");
    expect(encoded).not.toContain("Exp");
    expect(encoded).toContain("Mul");
  });

  it("refuses a graph that needs a placeholder's data, and a second rule for an op", () => {
    const t = new Tape("placeholder");
    const p = t.placeholder("beta", "float32", [3]);
    t.output(t.op("Neg", [p]), "y");
    expect(() => t.encode()).toThrow(/placeholder 'beta'/);
    expect(() => registerGradient("Mul", () => [])).toThrow(/already registered/);
  });

  it("names the op when no rule exists", () => {
    const t = new Tape("norule");
    const x = t.input("x", "float32", [3]);
    const y = t.op("Relu", [x]);
    expect(() => gradients(t, [y], [t.input("dy", "float32", [3])], [x])).toThrow(/no gradient rule for op 'Relu'/);
    const erf = t.op("Gelu", [x]);
    expect(() => gradients(t, [erf], [t.input("dy2", "float32", [3])], [x])).toThrow(/only approximate = 'tanh'/);
  });
});
