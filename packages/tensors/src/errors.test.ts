// Every `throw new TensorError` in the package, each with a message that
// names the offending values. (ORT-specific refusals are in ort.test.ts.)
import { describe, expect, it } from "vitest";
import {
  Rng,
  Tensor,
  TensorError,
  allocateStorage,
  bytesPerElement,
  chunk,
  concat,
  concatInto,
  evenSplitSizes,
  narrow,
  narrowInto,
  normalizeAxis,
  permute,
  permuteInto,
  randomNormal,
  randomUniform,
  split,
  toDType,
  toDTypeInto,
  type DType,
  type RngState,
} from "@ulysses/tensors";
import { dtypeOfStorage } from "./dtype.js";

/** Runs `f`, expects a TensorError whose message matches every pattern. */
function expectTensorError(f: () => unknown, ...patterns: (string | RegExp)[]): void {
  let caught: unknown;
  try {
    f();
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(TensorError);
  const message = (caught as Error).message;
  for (const p of patterns) {
    if (typeof p === "string") expect(message).toContain(p);
    else expect(message).toMatch(p);
  }
}

const t23 = () => Tensor.from("float32", [2, 3], [0, 1, 2, 3, 4, 5]);

describe("dtype and shape errors", () => {
  it("unknown dtypes name the dtype and the known ones", () => {
    expectTensorError(() => bytesPerElement("float8" as DType), "'float8'", "float32, float64");
    expectTensorError(() => allocateStorage("complex64" as DType, 3), "'complex64'", "bfloat16");
    expectTensorError(() => new Tensor("int16" as DType, [2]), "'int16'", "uint8");
  });

  it("storage of an unsupported class", () => {
    expectTensorError(() => dtypeOfStorage(new Int16Array(2) as never), "[object Int16Array]");
  });

  it("invalid shapes", () => {
    expectTensorError(() => new Tensor("float32", [2, -1]), "[2, -1]", "non-negative integer");
    expectTensorError(() => Tensor.zeros("float32", [1.5]), "[1.5]");
  });

  it("axis out of range", () => {
    expectTensorError(() => normalizeAxis(3, 3), "axis 3", "rank 3");
    expectTensorError(() => normalizeAxis(-4, 3), "axis -4", "rank 3");
    expectTensorError(() => normalizeAxis(0.5, 3), "axis 0.5");
  });

  it("reshape: two -1s, an uninferable -1, different element counts", () => {
    expectTensorError(() => t23().reshape([-1, -1]), "[2, 3] -> [-1, -1]", "at most one");
    expectTensorError(() => t23().reshape([4, -1]), "[2, 3] (6 elements) -> [4, -1]", "cannot infer");
    expectTensorError(() => t23().reshape([0, -1]), "-> [0, -1]", "cannot infer");
    expectTensorError(() => t23().reshape([4, 2]), "(6 elements) -> [4, 2] (8 elements)");
  });
});

describe("Tensor construction errors", () => {
  it("data of the wrong class or length", () => {
    expectTensorError(() => new Tensor("float32", [2], new Float64Array(2) as never), "float32", "Float64Array", "[2]");
    expectTensorError(() => new Tensor("float32", [2, 2], new Float32Array(3)), "[2, 2] needs 4", "has 3");
  });

  it("Tensor.from: count, 16-bit dtypes, number/bigint mismatch", () => {
    expectTensorError(() => Tensor.from("float32", [2, 2], [1, 2, 3]), "[2, 2] needs 4", "3 values");
    expectTensorError(() => Tensor.from("bfloat16", [1], [1]), "bfloat16", "toDType");
    expectTensorError(() => Tensor.from("int64", [2], [1, 2]), "int64", "number values (first: 1)", "bigint");
    expectTensorError(() => Tensor.from("int32", [1], [5n]), "int32", "bigint values (first: 5)");
    expect(Array.from(Tensor.from("int64", [2], [1n, -2n]).data)).toEqual([1n, -2n]);
  });
});

describe("layout errors", () => {
  it("permute axes that are not a permutation", () => {
    expectTensorError(() => permute(t23(), [0, 0]), "[0, 0]", "0..1");
    expectTensorError(() => permute(t23(), [1]), "[1]", "0..1");
    expectTensorError(() => permute(t23(), [0, 2]), "axis 2", "rank 2");
  });

  it("permuteInto: wrong output, aliased output", () => {
    expectTensorError(() => permuteInto(t23(), [1, 0], new Tensor("float32", [2, 3])), "Tensor(float32, [2, 3])", "float32 [3, 2]");
    expectTensorError(() => permuteInto(t23(), [1, 0], new Tensor("float64", [3, 2])), "Tensor(float64, [3, 2])", "float32 [3, 2]");
    const t = t23();
    expectTensorError(() => permuteInto(t, [1, 0], t.reshape([3, 2])), "shares memory", "Tensor(float32, [2, 3])");
    const buffer = new Float32Array(12);
    const a = new Tensor("float32", [2, 3], buffer.subarray(0, 6));
    const b = new Tensor("float32", [3, 2], buffer.subarray(4, 10));
    expectTensorError(() => permuteInto(a, [1, 0], b), "shares memory");
    const c = new Tensor("float32", [3, 2], new Float32Array(buffer.buffer, 24, 6)); // bytes 24..48: after a
    expect(permuteInto(a, [1, 0], c)).toBe(c);
  });

  it("narrow outside the axis", () => {
    expectTensorError(() => narrow(t23(), 1, 2, 2), "[2, 4)", "axis 1 of size 3", "[2, 3]");
    expectTensorError(() => narrow(t23(), 0, -1, 1), "[-1, 0)");
    expectTensorError(() => narrow(t23(), 0, 0.5, 1), "[0.5, 1.5)");
    expectTensorError(() => narrowInto(t23(), 1, 2, 2, new Tensor("float32", [2, 2])), "[2, 4)", "axis 1 of size 3");
  });

  it("narrowInto: a wrong or aliased output", () => {
    expectTensorError(() => narrowInto(t23(), 1, 1, 2, new Tensor("float32", [2, 3])), "Tensor(float32, [2, 3])", "float32 [2, 2]");
    expectTensorError(() => narrowInto(t23(), 1, 1, 2, new Tensor("float64", [2, 2])), "Tensor(float64, [2, 2])");
    const t = t23();
    expectTensorError(() => narrowInto(t, 1, 1, 2, new Tensor("float32", [2, 2], t.data.subarray(2, 6))), "shares memory");
  });

  it("split sizes that do not add up", () => {
    expectTensorError(() => split(t23(), [1, 1], 1), "[1, 1] (sum 2)", "axis 1 of size 3");
    expectTensorError(() => split(t23(), [4, -1], 1), "[4, -1] (sum 3)");
  });

  it("evenSplitSizes and chunk with bad counts", () => {
    expectTensorError(() => evenSplitSizes(5, 0), "into 0 parts");
    expectTensorError(() => evenSplitSizes(5, 1.5), "into 1.5 parts");
    expectTensorError(() => evenSplitSizes(-2, 2), "length of -2");
    expectTensorError(() => chunk(t23(), 0, 1), "into 0 parts");
  });

  it("concat: nothing to join, mismatched parts, wrong or aliased output", () => {
    expectTensorError(() => concat([], 1), "axis 1", "got 0 tensors");
    expectTensorError(() => concatInto([], 0, t23()), "axis 0", "got 0 tensors");
    expectTensorError(() => concat([t23(), new Tensor("float32", [3, 3])], 1), "axis 1", "Tensor(float32, [3, 3])", "Tensor(float32, [2, 3])");
    expectTensorError(() => concat([t23(), new Tensor("float64", [2, 3])], 0), "Tensor(float64, [2, 3])");
    expectTensorError(() => concat([t23(), new Tensor("float32", [2, 3, 1])], 0), "Tensor(float32, [2, 3, 1])");
    expectTensorError(() => concatInto([t23(), t23()], 0, new Tensor("float32", [4, 2])), "Tensor(float32, [4, 2])", "float32 [4, 3]");
    const out = new Tensor("float32", [4, 3]);
    const part = new Tensor("float32", [2, 3], out.data.subarray(6, 12));
    expectTensorError(() => concatInto([t23(), part], 0, out), "shares memory with part 1", "Tensor(float32, [2, 3])");
  });
});

describe("conversion errors", () => {
  it("dtypes outside the conversion set", () => {
    expectTensorError(() => toDType(new Tensor("int64", [1]), "float32"), "int64 -> float32", "supported: float32, float64, float16, bfloat16, int32");
    expectTensorError(() => toDType(new Tensor("float32", [1]), "uint8" as never), "float32 -> uint8");
    expectTensorError(() => toDTypeInto(new Tensor("uint8", [1]), new Tensor("float32", [1])), "uint8 -> float32");
  });

  it("toDTypeInto: shape mismatch, overlapping memory", () => {
    expectTensorError(() => toDTypeInto(t23(), new Tensor("float16", [3, 2])), "[3, 2]", "[2, 3]");
    const t = t23();
    const bits = new Tensor("int32", [2, 3], new Int32Array(t.data.buffer));
    expectTensorError(() => toDTypeInto(t, bits), "Tensor(int32, [2, 3])", "shares memory", "Tensor(float32, [2, 3])");
  });

  it.each([
    [NaN, "NaN"],
    [Infinity, "Infinity"],
    [-Infinity, "-Infinity"],
    [2147483648, "2147483648"],
    [-2147483904, "-2147483904"],
  ])("float -> int32 refuses %s and names the element", (value, shown) => {
    const t = Tensor.from("float32", [3], [1, 2, value]);
    expectTensorError(() => toDType(t, "int32"), "float32 -> int32", "element 2", `is ${shown}`);
  });

  it("float16 Inf -> int32 is refused too", () => {
    expectTensorError(() => toDType(new Tensor("float16", [1], new Uint16Array([0x7c00])), "int32"), "float16 -> int32", "element 0 is Infinity");
  });
});

describe("random errors", () => {
  it("bad seeds and streams", () => {
    expectTensorError(() => new Rng(-1), "seed -1", "non-negative");
    expectTensorError(() => new Rng(1.5), "seed 1.5");
    expectTensorError(() => new Rng(2 ** 53), "seed 9007199254740992", "bigint");
    expectTensorError(() => new Rng(1n << 64n), "seed 18446744073709551616", "[0, 2^64)");
    expectTensorError(() => new Rng(1, -3), "stream -3");
    expectTensorError(() => new Rng(1, -1n), "stream -1");
  });

  it("int() outside [1, 2^53]", () => {
    const rng = new Rng(1);
    expectTensorError(() => rng.int(0), "int(maxExclusive): 0");
    expectTensorError(() => rng.int(2.5), "2.5");
    expectTensorError(() => rng.int(2 ** 54), "18014398509481984");
  });

  it("fill ranges", () => {
    const rng = new Rng(1);
    expectTensorError(() => rng.fillUniform(new Float32Array(2), 1, 1), "low=1, high=1");
    expectTensorError(() => rng.fillUniform(new Float64Array(2), 0, Infinity), "high=Infinity");
    expectTensorError(() => rng.fillUniform(new Float32Array(2), 1, 1 + 1e-12), "low=1 and high=1.000000000001", "same float32");
    expect(rng.fillUniform(new Float64Array(2), 1, 1 + 1e-12).every((v) => v >= 1 && v < 1 + 1e-12)).toBe(true);
    expectTensorError(() => rng.fillNormal(new Float32Array(2), 0, -1), "mean=0, std=-1");
    expectTensorError(() => rng.fillNormal(new Float32Array(2), NaN, 1), "mean=NaN");
  });

  it.each([
    ["a wrong algorithm", { algorithm: "xoshiro" }, '"algorithm":"xoshiro"'],
    ["words out of range", { key: [2 ** 32, 0] }, '"key":[4294967296,0]'],
    ["bigint words", { key: [1n, 0n] }, '"key":["1n","0n"]'],
    ["a position beyond the block", { position: 5 }, '"position":5'],
    ["a mid-block position before any block", { position: 1, counter: [0, 0] }, '"counter":[0,0],"position":1'],
    ["a non-finite spare normal", { spareNormal: Infinity }, '"spareNormal":"Infinity"'],
  ])("setState refuses %s and shows the offending value", (_label, change, shown) => {
    const good = new Rng(1).getState();
    const bad = { ...good, ...change } as unknown as RngState;
    expectTensorError(() => new Rng(1).setState(bad), "not a philox4x32-10 RNG state", shown);
  });

  it("setState refuses something that is not an object", () => {
    expectTensorError(() => new Rng(1).setState(null as never), "state: null");
  });

  it("random tensors need a seed or rng, and a float32/float64 dtype", () => {
    expectTensorError(() => randomUniform([2], {}), "randomUniform", "give a seed");
    expectTensorError(() => randomNormal([2], { stream: 1 }), "randomNormal", '["stream"]');
    expectTensorError(() => randomNormal([2], { seed: 1, dtype: "float16" as never }), "dtype float16", "toDType");
    expectTensorError(() => randomUniform([2, -1], { seed: 1 }), "[2, -1]");
  });
});
