// ONNX Runtime interop: toOrt/fromOrt share memory (no copies), refuse what
// ONNX Runtime cannot take, and feed a real onnxruntime-node session. ONNX
// Runtime's own Cast kernel serves as an independent reference for the 16-bit
// conversions.
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Rng, Tensor, toDType } from "@ulysses/tensors";
import { fromOrt, toOrt } from "@ulysses/tensors/ort";
import { ONNX_TYPE, onnxModel } from "./testing-fixtures/onnx-model.js";

const options: ort.InferenceSession.SessionOptions = { intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: "disabled" };

describe("toOrt / fromOrt share memory", () => {
  it("toOrt wraps the same TypedArray; writes show on both sides", () => {
    const t = Tensor.from("float32", [2, 3], [1, 2, 3, 4, 5, 6]);
    const o = toOrt(t);
    expect(o.data).toBe(t.data);
    expect(o.type).toBe("float32");
    expect(o.dims).toEqual([2, 3]);
    (o.data as Float32Array)[4] = -7;
    expect(t.data[4]).toBe(-7);
    t.data[0] = 42;
    expect((o.data as Float32Array)[0]).toBe(42);
  });

  it("fromOrt wraps the same TypedArray; writes show on both sides", () => {
    const o = new ort.Tensor("int32", new Int32Array([1, 2, 3, 4]), [4, 1]);
    const t = fromOrt(o);
    expect(t.dtype).toBe("int32");
    expect(t.shape).toEqual([4, 1]);
    expect(t.data).toBe(o.data);
    t.data[1] = 9;
    expect((o.data as Int32Array)[1]).toBe(9);
    (o.data as Int32Array)[3] = -1;
    expect(t.data[3]).toBe(-1);
  });

  it.each(["float32", "float64", "float16", "int32", "int64", "uint8"] as const)("%s round-trips through toOrt and fromOrt", (dtype) => {
    const t = new Tensor(dtype, [3, 2]);
    const back = fromOrt(toOrt(t));
    expect(back.dtype).toBe(dtype);
    expect(back.shape).toEqual([3, 2]);
    expect(back.data).toBe(t.data);
  });

  it("a view made by reshape shares memory too", () => {
    const t = Tensor.from("float32", [2, 2], [1, 2, 3, 4]);
    const o = toOrt(t.reshape([4]));
    expect(o.data).toBe(t.data);
    expect(o.dims).toEqual([4]);
  });
});

describe("onnxruntime-node sessions", () => {
  let add: ort.InferenceSession;
  let castToHalf: ort.InferenceSession;
  let castFromHalf: ort.InferenceSession;
  let bf16Round: ort.InferenceSession;

  beforeAll(async () => {
    const n = ["n"];
    const f32 = (name: string, dims: (number | string)[] = n) => ({ name, elemType: ONNX_TYPE.float32, dims });
    const cast = (input: string, output: string, to: number) => ({ opType: "Cast", inputs: [input], outputs: [output], intAttributes: { to } });
    add = await ort.InferenceSession.create(
      onnxModel({
        nodes: [{ opType: "Add", inputs: ["x", "y"], outputs: ["z"] }],
        inputs: [f32("x", [2, "n"]), f32("y", [2, "n"])],
        outputs: [f32("z", [2, "n"])],
      }),
      options,
    );
    castToHalf = await ort.InferenceSession.create(
      onnxModel({ nodes: [cast("x", "y", ONNX_TYPE.float16)], inputs: [f32("x")], outputs: [{ name: "y", elemType: ONNX_TYPE.float16, dims: n }] }),
      options,
    );
    castFromHalf = await ort.InferenceSession.create(
      onnxModel({ nodes: [cast("x", "y", ONNX_TYPE.float32)], inputs: [{ name: "x", elemType: ONNX_TYPE.float16, dims: n }], outputs: [f32("y")] }),
      options,
    );
    // JavaScript has no bfloat16 tensors: round to bfloat16 and widen back inside the graph.
    bf16Round = await ort.InferenceSession.create(
      onnxModel({ nodes: [cast("x", "b", ONNX_TYPE.bfloat16), cast("b", "y", ONNX_TYPE.float32)], inputs: [f32("x")], outputs: [f32("y")] }),
      options,
    );
  });

  afterAll(async () => {
    for (const s of [add, castToHalf, castFromHalf, bf16Round]) await s?.release();
  });

  it("runs Add on toOrt tensors and fromOrt wraps the result without a copy", async () => {
    const x = Tensor.from("float32", [2, 3], [1, 2, 3, 4, 5, 6]);
    const y = Tensor.from("float32", [2, 3], [0.5, -2, 10, 1e-3, -5, 6]);
    const { z } = await add.run({ x: toOrt(x), y: toOrt(y) });
    const out = fromOrt(z!);
    expect(out.data).toBe(z!.data);
    expect(out.shape).toEqual([2, 3]);
    expect(Array.from(out.data as Float32Array)).toEqual([1.5, 0, 13, Math.fround(4 + Math.fround(1e-3)), 0, 12]);
  });

  it("ONNX Runtime's Cast float32 -> float16 gives the same bits as toDType", async () => {
    const specials = [0, -0, 1, 65504, 65519, 65520, 1e6, -1e6, 2 ** -24, 2 ** -25, 3 * 2 ** -25, 1 + 2 ** -11, 1 + 3 * 2 ** -11, Infinity, -Infinity];
    const x = new Tensor("float32", [4096 + specials.length]);
    new Rng(31).fillNormal(x.data.subarray(0, 2048), 0, 1000);
    new Rng(32).fillNormal(x.data.subarray(2048, 4096), 0, 1e-5);
    x.data.set(specials, 4096);
    const { y } = await castToHalf.run({ x: toOrt(x) });
    expect(y!.type).toBe("float16");
    expect(Array.from(toDType(x, "float16").data)).toEqual(Array.from(y!.data as Uint16Array));
  });

  it("ONNX Runtime's Cast float16 -> float32 gives the same values as toDType, for all 63488 non-NaN patterns", async () => {
    const all = Array.from({ length: 65536 }, (_, h) => h).filter((h) => (h & 0x7c00) !== 0x7c00 || (h & 0x3ff) === 0);
    const h = new Tensor("float16", [all.length], new Uint16Array(all));
    const { y } = await castFromHalf.run({ x: toOrt(h) });
    expect(Array.from(toDType(h, "float32").data)).toEqual(Array.from(y!.data as Float32Array));
  });

  it("ONNX Runtime's Cast float32 -> bfloat16 -> float32 matches toDType", async () => {
    const specials = [1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 3.4028234663852886e38, Infinity, -Infinity, 0, -0, 2 ** -130];
    const x = new Tensor("float32", [4096 + specials.length]);
    new Rng(33).fillNormal(x.data.subarray(0, 4096), 0, 100);
    x.data.set(specials, 4096);
    const { y } = await bf16Round.run({ x: toOrt(x) });
    const ours = toDType(toDType(x, "bfloat16"), "float32");
    expect(Array.from(ours.data)).toEqual(Array.from(y!.data as Float32Array));
  });

  it("toOrt refuses bfloat16 (no such tensor type in JavaScript) with a clear message", () => {
    const x = toDType(Tensor.from("float32", [2], [1, 2]), "bfloat16");
    expect(() => new ort.Tensor("bfloat16" as ort.Tensor.Type, x.data, [2])).toThrow(/bfloat16/);
    expect(() => toOrt(x)).toThrow(/Tensor\(bfloat16, \[2\]\).*no bfloat16 tensors.*toDType/);
  });

  it("session.run rejects shared memory, and toOrt refuses it first with a clear message", async () => {
    const x = Tensor.zeros("float32", [2, 1], { shared: true });
    expect(x.isShared).toBe(true);
    expect(() => toOrt(x)).toThrow(/Tensor\(float32, \[2, 1\]\) lives on a SharedArrayBuffer.*t\.clone\(\)/);
    // The fact the refusal protects against: onnxruntime-node itself rejects the shared buffer.
    const raw = new ort.Tensor("float32", x.data, [2, 1]);
    await expect(add.run({ x: raw, y: raw })).rejects.toThrow();
    const { z } = await add.run({ x: toOrt(x.clone()), y: toOrt(x.clone()) });
    expect(Array.from(z!.data as Float32Array)).toEqual([0, 0]);
  });
});

describe("fromOrt refusals", () => {
  it("names an ONNX Runtime type without a dtype", () => {
    const o = new ort.Tensor("bool", new Uint8Array([1, 0]), [2]);
    expect(() => fromOrt(o)).toThrow(/type 'bool' has no @ulysses\/tensors dtype/);
  });

  it("refuses a disposed tensor (no CPU data)", () => {
    const o = new ort.Tensor("float32", new Float32Array(3), [3]);
    o.dispose();
    expect(() => fromOrt(o)).toThrow(/\(float32, \[3\]\) lives on 'none'/);
  });
});
