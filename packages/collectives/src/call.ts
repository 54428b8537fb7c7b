/**
 * Turns the arguments of one ProcessGroup call into this rank's `OpHeader`
 * (what it asks for) plus the tensors involved. Nothing here throws: an
 * argument error only this rank can see (not a tensor, splits that are not an
 * array, of the wrong length, negative, fractional or not summing to axis 0,
 * a root outside the group, an unknown reduce op, a bad ranks list) goes into
 * the header's `error`, so the header exchange still happens and every rank
 * rejects with the same message naming this rank (planOp). Headers stay
 * small and JSON-exact: only validated values go into them.
 */
import { Tensor } from "@ulysses/tensors";
import { asTensor } from "./buffer.js";
import type { OpHeader, P2PHeader } from "./plan.js";
import type { CommBuffer } from "./types.js";

/** A header before the group stamps its sequence number on it. */
export type Described = Omit<OpHeader, "seq">;

export interface DescribedCall {
  header: Described;
  input: Tensor | null;
  output: Tensor | null;
}

const SHOWN = 16;

/** Short, deterministic text for any argument value (error messages). */
export function show(value: unknown, depth = 0): string {
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) return String(value);
  if (typeof value === "bigint") return `${value}n`;
  if (typeof value === "string") return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
  if (typeof value === "symbol" || typeof value === "function") return typeof value;
  if (Array.isArray(value)) {
    if (depth > 0) return `array(${value.length})`;
    const items = Array.from({ length: Math.min(value.length, SHOWN) }, (_, i) => show(value[i], depth + 1));
    return `[${items.join(", ")}${value.length > SHOWN ? `, ... (${value.length} entries)` : ""}]`;
  }
  if (value instanceof Tensor) return `Tensor ${value.dtype} [${value.shape.join(", ")}]`;
  if (ArrayBuffer.isView(value)) return `${value.constructor.name}(${(value as unknown as { length?: number }).length ?? value.byteLength})`;
  return Object.prototype.toString.call(value);
}

const isNonNegativeInteger = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0;

/** Either a value that may go into a header, or this rank's argument error. */
type Checked<T> = { ok: T } | { error: string };

/**
 * Split sizes: absent (undefined or null: the default), or an array of `size`
 * non-negative integers summing to `rows` when given.
 */
export function checkSplitsArg(what: string, value: unknown, size: number, rows?: number): Checked<number[] | null> {
  if (value === undefined || value === null) return { ok: null };
  if (!Array.isArray(value)) return { error: `${what} must be an array of ${size} non-negative integers (one per rank), got ${show(value)}` };
  if (value.length !== size) return { error: `${what} ${show(value)} has ${value.length} entries but the group has ${size} ranks (one per rank)` };
  const bad = value.findIndex((v) => !isNonNegativeInteger(v));
  if (bad >= 0) return { error: `${what} ${show(value)} must be ${size} non-negative integers; entry ${bad} is ${show(value[bad], 1)}` };
  const splits = value as number[];
  const total = splits.reduce((a, b) => a + b, 0);
  if (rows !== undefined && total !== rows) return { error: `${what} ${show(value)} sum to ${total} but axis 0 has ${rows} rows` };
  return { ok: [...splits] };
}

/** The options argument: absent, or a plain object. */
function optionsOf(op: string, value: unknown): Checked<Record<string, unknown>> {
  if (value === undefined || value === null) return { ok: {} };
  if (typeof value !== "object" || Array.isArray(value) || value instanceof Tensor || ArrayBuffer.isView(value))
    return { error: `${op} options must be an object, got ${show(value)}` };
  return { ok: value as Record<string, unknown> };
}

const REDUCE_OPS = ["sum", "mean", "max"];

function reduceOpArg(value: unknown): Checked<"sum" | "mean" | "max"> {
  if (value === undefined) return { ok: "sum" };
  if (typeof value !== "string" || !REDUCE_OPS.includes(value)) return { error: `unknown reduce op ${show(value)}; known: ${REDUCE_OPS.join(", ")}` };
  return { ok: value as "sum" | "mean" | "max" };
}

function tensorOrError(buffer: unknown): Tensor | string {
  try {
    return asTensor(buffer as CommBuffer);
  } catch (e) {
    return (e as Error).message;
  }
}

/**
 * The shared shape of every data-carrying describe: the tensor, an optional
 * caller output, then op-specific fields from `extra` (which returns a
 * header fragment or an error).
 */
function withTensor(
  op: OpHeader["op"],
  buffer: unknown,
  options: unknown,
  extra: (t: Tensor, o: Record<string, unknown>) => Checked<Described>,
  allowOutput: boolean,
): DescribedCall {
  const fail = (error: string, input: Tensor | null = null): DescribedCall => ({ header: { op, error }, input, output: null });
  const t = tensorOrError(buffer);
  if (typeof t === "string") return fail(t);
  const opts = optionsOf(op, options);
  if ("error" in opts) return fail(opts.error, t);
  const output = allowOutput ? opts.ok.output : undefined;
  if (output !== undefined && output !== null && !(output instanceof Tensor)) return fail(`options.output must be a Tensor, got ${show(output)}`, t);
  const fields = extra(t, opts.ok);
  if ("error" in fields) return fail(fields.error, t);
  const d: Described = { ...fields.ok, op, dtype: t.dtype, shape: [...t.shape] };
  if (output instanceof Tensor) {
    d.outputShape = [...output.shape];
    d.outputDType = output.dtype;
    if (output.data === (t.data as unknown)) return fail("options.output must not be the input", t);
  }
  return { header: d, input: t, output: output instanceof Tensor ? output : null };
}

const rowsOf = (t: Tensor): number | undefined => (t.shape.length > 0 ? t.shape[0] : undefined);

export function describeAllToAll(input: unknown, options: unknown, size: number): DescribedCall {
  return withTensor(
    "allToAll",
    input,
    options,
    (t, o) => {
      if (t.shape.length === 0) return { error: `allToAll needs an input with at least one axis, got a scalar` };
      const inputSplits = checkSplitsArg("inputSplits", o.inputSplits, size, rowsOf(t));
      if ("error" in inputSplits) return inputSplits;
      const output = o.output instanceof Tensor ? o.output : null;
      const outputSplits = checkSplitsArg("outputSplits", o.outputSplits, size, output && output.shape.length > 0 ? output.shape[0] : undefined);
      if ("error" in outputSplits) return outputSplits;
      return { ok: { op: "allToAll", inputSplits: inputSplits.ok, outputSplits: outputSplits.ok } };
    },
    true,
  );
}

export function describeAllGather(input: unknown, options: unknown, size: number): DescribedCall {
  return withTensor(
    "allGather",
    input,
    options,
    (_, o) => {
      const sizes = checkSplitsArg("sizes", o.sizes, size);
      if ("error" in sizes) return sizes;
      return { ok: { op: "allGather", sizes: sizes.ok } };
    },
    true,
  );
}

export function describeReduceScatter(input: unknown, options: unknown, size: number): DescribedCall {
  return withTensor(
    "reduceScatter",
    input,
    options,
    (t, o) => {
      if (t.shape.length === 0) return { error: `reduceScatter needs an input with at least one axis, got a scalar` };
      const reduceOp = reduceOpArg(o.op);
      if ("error" in reduceOp) return reduceOp;
      const sizes = checkSplitsArg("sizes", o.sizes, size, rowsOf(t));
      if ("error" in sizes) return sizes;
      return { ok: { op: "reduceScatter", sizes: sizes.ok, reduceOp: reduceOp.ok } };
    },
    true,
  );
}

export function describeAllReduce(tensor: unknown, options: unknown): DescribedCall {
  return withTensor(
    "allReduce",
    tensor,
    options,
    (_, o) => {
      const reduceOp = reduceOpArg(o.op);
      if ("error" in reduceOp) return reduceOp;
      return { ok: { op: "allReduce", reduceOp: reduceOp.ok } };
    },
    false,
  );
}

export function describeBroadcast(tensor: unknown, options: unknown, size: number): DescribedCall {
  return withTensor(
    "broadcast",
    tensor,
    options,
    (_, o) => {
      const root = o.root;
      if (root === undefined) return { error: "broadcast needs options { root }" };
      if (typeof root !== "number" || !Number.isInteger(root)) return { error: `root ${show(root)} must be an integer group rank` };
      if (root < 0 || root >= size) return { error: `root ${root} is not a rank of a group of ${size}` };
      return { ok: { op: "broadcast", root } };
    },
    false,
  );
}

export function describeNewGroup(ranks: unknown, size: number): Described {
  if (!Array.isArray(ranks)) return { op: "newGroup", error: `ranks must be an array of group ranks, got ${show(ranks)}` };
  const bad = ranks.findIndex((r) => !isNonNegativeInteger(r) || r >= size);
  if (ranks.length === 0 || bad >= 0 || new Set(ranks).size !== ranks.length) {
    const why = ranks.length === 0 ? "it is empty" : bad >= 0 ? `entry ${bad} is ${show(ranks[bad], 1)}` : "it has duplicates";
    return { op: "newGroup", error: `ranks ${show(ranks)} must be distinct group ranks in [0, ${size}); ${why}` };
  }
  return { op: "newGroup", ranks: [...(ranks as number[])] };
}

/**
 * One side of a point-to-point message. A bad tensor or tag goes into the
 * header's `error` (the peer then rejects with the same text); a bad peer
 * cannot be sent anywhere and is returned as `peerError`.
 */
export function describeP2P(
  kind: "send" | "recv",
  buffer: unknown,
  peer: unknown,
  tag: unknown,
  rank: number,
  size: number,
): { header: P2PHeader; tensor: Tensor | null; peerError: string | null } {
  const peerError =
    typeof peer !== "number" || !Number.isInteger(peer) || peer < 0 || peer >= size || peer === rank
      ? `${kind} on rank ${rank}: peer ${show(peer)} must be another rank of the group of ${size}`
      : null;
  const t = tensorOrError(buffer);
  const tagOk = typeof tag === "number" && Number.isInteger(tag);
  const errors = [typeof t === "string" ? t : "", tagOk ? "" : `tag ${show(tag)} must be an integer`].filter((e) => e);
  const tensor = typeof t === "string" ? null : t;
  const header: P2PHeader = { dtype: tensor?.dtype ?? "uint8", shape: tensor ? [...tensor.shape] : [0], tag: tagOk ? (tag as number) : 0 };
  if (errors.length > 0) header.error = errors.join("; ");
  return { header, tensor: errors.length > 0 ? null : tensor, peerError };
}
