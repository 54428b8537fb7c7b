/**
 * What the run header says of a rank's kernels (@ulysses/native-ops'
 * createRankKernels chooses them): the ops of the model that fall back to a
 * slower path, and where the MFU's MatMul rate is measured.
 */
import { NATIVE_OPS, fusedAttentionStatus, nativeRateCache } from "@ulysses/native-ops";
import { blockConfigOf, elementwiseOpsOf, type GptConfig } from "@ulysses/model";
import type { MatmulRateOptions } from "@ulysses/measure";

/**
 * The header's note on the elementwise ops of `model` (its norm, activation
 * and RoPE) that run as ONNX Runtime graphs although the run has native
 * kernels for others (e.g. RMSNorm or SwiGLU beside native LayerNorm and
 * GELU); empty when none does or no native kernels run.
 */
export function slowerPathNote(model: GptConfig, nativeOps: boolean): string {
  if (!nativeOps) return "";
  const slower = [...new Set<string>(elementwiseOpsOf(blockConfigOf(model)))].filter((op) => !NATIVE_OPS.has(op));
  return slower.length === 0 ? "" : `; slower path (ONNX Runtime graphs, no native kernel): ${slower.join(", ")}`;
}

/**
 * Where the trainer measures the MatMul rate, its MFU's denominator: ONNX Runtime's MatMul kernel on the addon's path (a
 * NativeSessionCache, outputs reused) whenever the addon loads, whatever kernels the run itself uses; else onnxruntime-node, whose
 * per-run output allocation and copy count in the rate (measured lower: docs/results/memory/calibration.md), so the MFU reads high. `path` says which, for the run header.
 */
export function matmulRateCache(): { cache: MatmulRateOptions["cache"]; path: string } {
  const status = fusedAttentionStatus();
  if (!status.available) return { cache: undefined, path: "through onnxruntime-node, whose output copies count: the MFU reads high" };
  return { cache: nativeRateCache, path: "on the addon's path" };
}
