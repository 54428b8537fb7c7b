/**
 * Turns the arguments of one ProcessGroup call into this rank's `OpHeader`
 * (what it asks for) plus the tensors involved. Argument errors only this
 * rank can see go into the header so that every rank reports them; the
 * backends do the exchange and the data movement.
 */
import { Tensor } from "@ulysses/tensors";
import { asTensor } from "./buffer.js";
import type { OpHeader } from "./plan.js";
import type { AllGatherOptions, AllToAllOptions, Buffer, ReduceOp, ReduceScatterOptions } from "./types.js";

/** A header before the group stamps its sequence number on it. */
export type Described = Omit<OpHeader, "seq">;

export interface DescribedCall {
  header: Described;
  input: Tensor | null;
  output: Tensor | null;
}

function tensorOrError(buffer: Buffer): Tensor | string {
  try {
    return asTensor(buffer);
  } catch (e) {
    return (e as Error).message;
  }
}

/** input: the input, or the in-place tensor of allReduce and broadcast; output: a caller-provided output. */
function withTensor(op: OpHeader["op"], buffer: Buffer, extra: () => Described, output?: Tensor): DescribedCall {
  const t = tensorOrError(buffer);
  if (typeof t === "string") return { header: { op, error: t }, input: null, output: null };
  if (output !== undefined && !(output instanceof Tensor)) return { header: { op, error: "options.output must be a Tensor" }, input: t, output: null };
  const d: Described = { dtype: t.dtype, shape: [...t.shape], ...extra() };
  if (output) {
    d.outputShape = [...output.shape];
    d.outputDType = output.dtype;
    if (output.data === (t.data as unknown)) d.error = "options.output must not be the input";
  }
  return { header: d, input: t, output: output ?? null };
}

const arrayOrNull = (a: readonly number[] | undefined) => (a === undefined ? null : [...a]);

export function describeAllToAll(input: Buffer, options: AllToAllOptions = {}): DescribedCall {
  return withTensor("allToAll", input, () => ({ op: "allToAll", inputSplits: arrayOrNull(options.inputSplits), outputSplits: arrayOrNull(options.outputSplits) }), options.output);
}

export function describeAllGather(input: Buffer, options: AllGatherOptions = {}): DescribedCall {
  return withTensor("allGather", input, () => ({ op: "allGather", sizes: arrayOrNull(options.sizes) }), options.output);
}

export function describeReduceScatter(input: Buffer, options: ReduceScatterOptions = {}): DescribedCall {
  return withTensor("reduceScatter", input, () => ({ op: "reduceScatter", sizes: arrayOrNull(options.sizes), reduceOp: options.op ?? "sum" }), options.output);
}

export function describeAllReduce(tensor: Buffer, op: ReduceOp = "sum"): DescribedCall {
  return withTensor("allReduce", tensor, () => ({ op: "allReduce", reduceOp: op }));
}

export function describeBroadcast(tensor: Buffer, root: number): DescribedCall {
  return withTensor("broadcast", tensor, () => ({ op: "broadcast", root }));
}
