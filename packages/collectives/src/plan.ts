/**
 * Cross-rank argument validation. Every rank describes its call in a small
 * serialisable `OpHeader`; once all headers of a call are known, `planOp`
 * turns them into one `Plan` (who sends how many rows to whom) or one error
 * message. It is a pure function of all headers, so every rank that runs it
 * reaches the same verdict and rejects with the same text: the local backend
 * calls it once per call, the threads backend on every rank after the header
 * exchange, and an MPI backend can do the same after an allgather of headers.
 * Moving data is left to the backends.
 */
import { bytesPerElement, formatShape, isDType, type DType } from "@ulysses/tensors";
import type { OpKind, ReduceOp } from "./types.js";

export type HeaderOp = Exclude<OpKind, "send" | "recv"> | "newGroup";

/** One rank's description of its call (JSON-serialisable). */
export interface OpHeader {
  op: HeaderOp;
  seq: number;
  dtype?: DType;
  shape?: number[];
  inputSplits?: number[] | null;
  outputSplits?: number[] | null;
  sizes?: number[] | null;
  /** Shape and dtype of a caller-provided output, if any. */
  outputShape?: number[] | null;
  outputDType?: DType | null;
  reduceOp?: ReduceOp;
  root?: number;
  ranks?: number[];
  /** An argument error only this rank can see; reported by every rank. */
  error?: string;
}

interface PlanBase {
  size: number;
  dtype: DType;
  elementBytes: number;
}

export type Plan =
  | (PlanBase & { op: "allToAll"; rowShape: number[]; rowElements: number; rowBytes: number; sendRows: number[][] })
  | (PlanBase & { op: "allGather"; rowShape: number[]; rowElements: number; rowBytes: number; rows: number[] })
  | (PlanBase & { op: "reduceScatter"; rowShape: number[]; rowElements: number; rowBytes: number; rows: number[]; reduceOp: ReduceOp })
  | (PlanBase & { op: "allReduce"; shape: number[]; numel: number; reduceOp: ReduceOp })
  | (PlanBase & { op: "broadcast"; shape: number[]; numel: number; root: number })
  | (PlanBase & { op: "barrier" })
  | (PlanBase & { op: "newGroup"; ranks: number[] });

export type PlanResult = { ok: true; plan: Plan } | { ok: false; message: string };

const INTEGER_DTYPES: readonly DType[] = ["int32", "int64", "uint8"];

/** Shape of rank `rank`'s output for a data-moving plan. */
export function outputShapeOf(plan: Plan, rank: number): number[] {
  switch (plan.op) {
    case "allToAll":
      return [plan.sendRows.reduce((acc, row) => acc + row[rank]!, 0), ...plan.rowShape];
    case "allGather":
      return [plan.rows.reduce((a, b) => a + b, 0), ...plan.rowShape];
    case "reduceScatter":
      return [plan.rows[rank]!, ...plan.rowShape];
    case "allReduce":
    case "broadcast":
      return plan.shape;
    default:
      return [];
  }
}

class Invalid extends Error {}

function fail(message: string): never {
  throw new Invalid(message);
}

const list = (values: readonly unknown[]) => values.map((v, r) => `rank ${r} ${v}`).join(", ");
const sameArray = (a: readonly number[] | null | undefined, b: readonly number[] | null | undefined) =>
  (a ?? null) === (b ?? null) || (!!a && !!b && a.length === b.length && a.every((v, i) => v === b[i]));
const fmt = (a: readonly number[] | null | undefined): string => {
  if (!Array.isArray(a)) return a == null ? "none" : String(a);
  return a.length > 16 ? `[${a.slice(0, 16).join(", ")}, ... (${a.length} entries)]` : `[${a.join(", ")}]`;
};

function checkSplits(what: string, splits: readonly number[], size: number, rank: number, rows?: number): void {
  if (!Array.isArray(splits) || splits.length !== size || splits.some((s) => !Number.isInteger(s) || s < 0)) {
    fail(`rank ${rank} ${what} ${fmt(splits)} must be ${size} non-negative integers (one per rank)`);
  }
  const sum = splits.reduce((a, b) => a + b, 0);
  if (rows !== undefined && sum !== rows) fail(`rank ${rank} ${what} ${fmt(splits)} sum to ${sum} but axis 0 has ${rows} rows`);
}

function evenRows(rows: number, size: number, rank: number, what: string): number[] {
  if (rows % size !== 0) fail(`rank ${rank} has ${rows} rows on axis 0, not divisible by the group size ${size}; pass ${what}`);
  return new Array<number>(size).fill(rows / size);
}

function common(headers: readonly OpHeader[]): { dtype: DType; shapes: number[][] } {
  const dtypes = headers.map((h) => h.dtype);
  if (dtypes.some((d) => d !== dtypes[0])) fail(`dtype mismatch: ${list(dtypes)}`);
  const dtype = dtypes[0]!;
  if (!isDType(dtype)) fail(`unknown dtype ${String(dtype)}`);
  return { dtype, shapes: headers.map((h) => h.shape ?? []) };
}

function rowShapeOf(shapes: number[][]): number[] {
  const ranks = shapes.map((s) => s.length);
  if (shapes.some((s) => s.length === 0)) fail(`every input needs at least one axis; shapes: ${list(shapes.map(formatShape))}`);
  const rows = shapes.map((s) => formatShape(s.slice(1)));
  if (ranks.some((n) => n !== ranks[0]) || rows.some((r) => r !== rows[0])) {
    fail(`row shapes (axes 1..) differ: ${list(shapes.map((s) => `${formatShape(s)}`))}`);
  }
  return shapes[0]!.slice(1);
}

function sameShape(shapes: number[][]): number[] {
  const text = shapes.map(formatShape);
  if (text.some((t) => t !== text[0])) fail(`shapes differ: ${list(text)}`);
  return shapes[0]!;
}

function reduceOpOf(headers: readonly OpHeader[], dtype: DType): ReduceOp {
  const ops = headers.map((h) => h.reduceOp ?? "sum");
  if (ops.some((o) => o !== ops[0])) fail(`reduce op mismatch: ${list(ops)}`);
  const op = ops[0]!;
  if (op !== "sum" && op !== "mean" && op !== "max") fail(`unknown reduce op '${String(op)}'; known: sum, mean, max`);
  if (op === "mean" && INTEGER_DTYPES.includes(dtype)) fail(`reduce op 'mean' needs a floating dtype, got ${dtype}`);
  return op;
}

function checkOutputs(plan: Plan, headers: readonly OpHeader[]): Plan {
  headers.forEach((h, r) => {
    if (!h.outputShape) return;
    const want = outputShapeOf(plan, r);
    if (h.outputDType !== plan.dtype || formatShape(h.outputShape) !== formatShape(want)) {
      fail(`rank ${r} passed an output ${h.outputDType} ${formatShape(h.outputShape)} but ${plan.op} delivers ${plan.dtype} ${formatShape(want)} to it`);
    }
  });
  return plan;
}

function build(headers: readonly OpHeader[]): Plan {
  const size = headers.length;
  const ops = headers.map((h) => h.op);
  if (ops.some((o) => o !== ops[0])) fail(`ranks called different operations: ${list(ops)}`);
  const errors = headers.map((h, r) => (h.error ? `rank ${r}: ${h.error}` : "")).filter((e) => e);
  if (errors.length > 0) fail(errors.join("; "));
  const op = ops[0]!;
  if (op === "barrier") return { op, size, dtype: "uint8", elementBytes: 1 };
  if (op === "newGroup") {
    const lists = headers.map((h) => h.ranks ?? []);
    if (lists.some((l) => !sameArray(l, lists[0]))) fail(`ranks differ: ${list(lists.map(fmt))}`);
    const ranks = lists[0]!;
    if (ranks.length === 0 || new Set(ranks).size !== ranks.length || ranks.some((r) => !Number.isInteger(r) || r < 0 || r >= size)) {
      fail(`ranks ${fmt(ranks)} must be distinct group ranks in [0, ${size})`);
    }
    return { op, size, dtype: "uint8", elementBytes: 1, ranks: [...ranks] };
  }
  const { dtype, shapes } = common(headers);
  const elementBytes = bytesPerElement(dtype);
  const base = { size, dtype, elementBytes };
  switch (op) {
    case "allToAll": {
      const rowShape = rowShapeOf(shapes);
      const sendRows = headers.map((h, r) => {
        const rows = shapes[r]![0]!;
        if (h.inputSplits == null) return evenRows(rows, size, r, "inputSplits");
        checkSplits("inputSplits", h.inputSplits, size, r, rows);
        return [...h.inputSplits];
      });
      headers.forEach((h, r) => {
        if (h.outputSplits == null) return;
        checkSplits("outputSplits", h.outputSplits, size, r);
        h.outputSplits.forEach((n, j) => {
          if (n !== sendRows[j]![r])
            fail(
              `rank ${r} expects ${n} rows from rank ${j} (outputSplits ${fmt(h.outputSplits)}) but rank ${j} sends ${sendRows[j]![r]} (inputSplits ${fmt(sendRows[j])})`,
            );
        });
      });
      const rowElements = rowShape.reduce((a, b) => a * b, 1);
      return checkOutputs({ ...base, op, rowShape, rowElements, rowBytes: rowElements * elementBytes, sendRows }, headers);
    }
    case "allGather": {
      const rowShape = rowShapeOf(shapes);
      const actual = shapes.map((s) => s[0]!);
      headers.forEach((h, r) => {
        if (h.sizes == null) return;
        checkSplits("sizes", h.sizes, size, r);
        if (!sameArray(h.sizes, actual)) fail(`rank ${r} passed sizes ${fmt(h.sizes)} but the ranks contribute ${fmt(actual)} rows`);
      });
      if (headers.some((h) => h.sizes == null) && actual.some((n) => n !== actual[0])) {
        fail(`ranks contribute different row counts ${fmt(actual)}; pass sizes on every rank`);
      }
      const rowElements = rowShape.reduce((a, b) => a * b, 1);
      return checkOutputs({ ...base, op, rowShape, rowElements, rowBytes: rowElements * elementBytes, rows: actual }, headers);
    }
    case "reduceScatter": {
      const shape = sameShape(shapes);
      if (shape.length === 0) fail("reduceScatter needs at least one axis");
      const reduceOp = reduceOpOf(headers, dtype);
      const lists = headers.map((h, r) => {
        if (h.sizes == null) return evenRows(shape[0]!, size, r, "sizes");
        checkSplits("sizes", h.sizes, size, r, shape[0]!);
        return [...h.sizes];
      });
      if (lists.some((l) => !sameArray(l, lists[0]))) fail(`sizes differ: ${list(lists.map(fmt))}`);
      const rowShape = shape.slice(1);
      const rowElements = rowShape.reduce((a, b) => a * b, 1);
      return checkOutputs({ ...base, op, rowShape, rowElements, rowBytes: rowElements * elementBytes, rows: lists[0]!, reduceOp }, headers);
    }
    case "allReduce": {
      const shape = sameShape(shapes);
      const reduceOp = reduceOpOf(headers, dtype);
      return { ...base, op, shape, numel: shape.reduce((a, b) => a * b, 1), reduceOp };
    }
    case "broadcast": {
      const shape = sameShape(shapes);
      const roots = headers.map((h) => h.root);
      if (roots.some((x) => x !== roots[0])) fail(`root differs: ${list(roots)}`);
      const root = roots[0]!;
      if (!Number.isInteger(root) || root < 0 || root >= size) fail(`root ${root} is not a rank of a group of ${size}`);
      return { ...base, op, shape, numel: shape.reduce((a, b) => a * b, 1), root };
    }
  }
}

/**
 * Validates the headers of one call (index = group rank) and returns the plan,
 * or the one message every rank rejects with.
 */
export function planOp(headers: readonly OpHeader[], groupRanks: readonly number[]): PlanResult {
  try {
    return { ok: true, plan: build(headers) };
  } catch (e) {
    if (!(e instanceof Invalid)) throw e;
    const op = headers[0]?.op ?? "?";
    return { ok: false, message: `${op} (call ${headers[0]?.seq} on group of world ranks ${fmt(groupRanks)}): ${e.message}` };
  }
}

/** Point-to-point header: what a sender offers or a receiver expects. */
export interface P2PHeader {
  dtype: DType;
  shape: number[];
  tag: number;
  /** An argument error of this side (bad tensor or tag): both sides reject, naming it. */
  error?: string;
}

/** The message both sides reject with when a send and a recv do not match (or either side's arguments are bad), or null. */
export function checkP2P(send: P2PHeader, recv: P2PHeader, src: number, dst: number): string | null {
  if (send.error || recv.error) {
    const sides = [send.error ? `sender rank ${src}: ${send.error}` : "", recv.error ? `receiver rank ${dst}: ${recv.error}` : ""].filter((s) => s);
    return `send/recv from rank ${src} to rank ${dst} refused: ${sides.join("; ")}`;
  }
  if (send.tag !== recv.tag || send.dtype !== recv.dtype || send.shape.reduce((a, b) => a * b, 1) !== recv.shape.reduce((a, b) => a * b, 1)) {
    return `send/recv mismatch from rank ${src} to rank ${dst}: sender offers ${send.dtype} ${formatShape(send.shape)} tag ${send.tag}, receiver expects ${recv.dtype} ${formatShape(recv.shape)} tag ${recv.tag}`;
  }
  return null;
}

const utf8 = new TextEncoder();

/**
 * `text` cut to at most `maxBytes` of UTF-8 (ending in "..." when cut): for
 * backends that carry messages in fixed-size slots. Both sides of an exchange
 * reject with the clipped text, so they still agree.
 */
export function clipText(text: string, maxBytes: number): string {
  if (utf8.encode(text).length <= maxBytes) return text;
  let keep = Math.max(0, maxBytes - 3);
  let cut = text.slice(0, keep);
  while (cut.length > 0 && utf8.encode(cut).length > keep) cut = cut.slice(0, --keep);
  return `${cut}...`;
}
