/**
 * Zero-copy conversion between @ulysses/tensors and ONNX Runtime tensors
 * (onnxruntime-common's Tensor, which onnxruntime-node re-exports). Both
 * directions wrap the same TypedArray; nothing is copied. ONNX Runtime rejects
 * SharedArrayBuffer-backed memory in session.run, so toOrt refuses it here with
 * a clear message instead. onnxruntime-common 1.30 has no bfloat16 tensor type
 * in JavaScript: bfloat16 tensors are refused too (convert them first).
 */
import { Tensor as OrtTensor } from "onnxruntime-common";
import type { DType, StorageByDType } from "./dtype.js";
import { TensorError } from "./errors.js";
import { Tensor } from "./tensor.js";

const ORT_TYPE: Partial<Record<DType, OrtTensor.Type>> = {
  float32: "float32",
  float64: "float64",
  float16: "float16",
  int32: "int32",
  int64: "int64",
  uint8: "uint8",
};

/** Wraps `t`'s storage as an ONNX Runtime tensor without copying. */
export function toOrt(t: Tensor): OrtTensor {
  if (t.isShared) {
    throw new TensorError(`${t} lives on a SharedArrayBuffer, which ONNX Runtime rejects; copy it to ordinary memory first (t.clone())`);
  }
  const type = ORT_TYPE[t.dtype];
  if (type === undefined) {
    throw new TensorError(`${t}: ONNX Runtime's JavaScript API has no ${t.dtype} tensors; convert with toDType(t, "float32") or "float16" first`);
  }
  return new OrtTensor(type, t.data as never, [...t.shape]);
}

/** Wraps an ONNX Runtime CPU tensor's data as a Tensor without copying. */
export function fromOrt(o: OrtTensor): Tensor {
  if (o.location !== "cpu" && o.location !== "cpu-pinned") {
    throw new TensorError(`ONNX Runtime tensor (${o.type}, [${o.dims.join(", ")}]) lives on '${o.location}'; download it to the CPU first (getData())`);
  }
  const entry = (Object.entries(ORT_TYPE) as [DType, string][]).find(([, v]) => v === o.type);
  if (!entry) throw new TensorError(`ONNX Runtime tensor type '${o.type}' has no @ulysses/tensors dtype; known: ${Object.values(ORT_TYPE).join(", ")}`);
  const dtype = entry[0];
  return new Tensor(dtype, o.dims as number[], o.data as StorageByDType[typeof dtype]);
}
