/**
 * Zero-copy conversion between @ulysses/tensors and ONNX Runtime tensors
 * (onnxruntime-common's Tensor, which onnxruntime-node re-exports). Both
 * directions wrap the same TypedArray; nothing is copied. ONNX Runtime rejects
 * SharedArrayBuffer-backed memory in session.run, so toOrt refuses it here with
 * a clear message instead.
 */
import { Tensor as OrtTensor } from "onnxruntime-common";
import type { DType, StorageByDType } from "./dtype.js";
import { TensorError } from "./errors.js";
import { Tensor } from "./tensor.js";

const ORT_TYPE: Record<DType, OrtTensor.Type> = {
  float32: "float32",
  float64: "float64",
  float16: "float16",
  bfloat16: "bfloat16" as OrtTensor.Type,
  int32: "int32",
  int64: "int64",
  uint8: "uint8",
};

/** Wraps `t`'s storage as an ONNX Runtime tensor without copying. */
export function toOrt(t: Tensor): OrtTensor {
  if (t.isShared) {
    throw new TensorError(`${t} lives on a SharedArrayBuffer, which ONNX Runtime rejects; copy it to ordinary memory first (t.clone())`);
  }
  return new OrtTensor(ORT_TYPE[t.dtype], t.data as never, [...t.shape]);
}

/** Wraps an ONNX Runtime CPU tensor's data as a Tensor without copying. */
export function fromOrt(o: OrtTensor): Tensor {
  const entry = (Object.entries(ORT_TYPE) as [DType, string][]).find(([, v]) => v === o.type);
  if (!entry) throw new TensorError(`ONNX Runtime tensor type '${o.type}' has no @ulysses/tensors dtype`);
  const dtype = entry[0];
  return new Tensor(dtype, o.dims as number[], o.data as StorageByDType[typeof dtype]);
}
