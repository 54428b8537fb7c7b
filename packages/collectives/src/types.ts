/**
 * The ProcessGroup contract every backend implements, shaped like
 * torch.distributed in camelCase. Groups are explicit values, never globals.
 * Every operation is asynchronous: the returned Promise is the work handle
 * (await it to wait). Operations are collective: every rank of the group calls
 * them in the same order with matching arguments; a mismatch rejects on every
 * rank with the same message, and a failed peer rejects every pending and
 * future operation of the group within the group's timeout.
 *
 * Layout convention: the split axis of allToAll, allGather and reduceScatter is
 * axis 0 of the (contiguous) tensor, as in torch's all_to_all_single. Callers
 * permute so the axis they exchange comes first.
 */
import type { DType, Storage, Tensor } from "@ulysses/tensors";

/** A tensor, or a bare TypedArray taken as a 1-D tensor. */
export type CommBuffer = Tensor | Storage;

export type ReduceOp = "sum" | "mean" | "max";

export type OpKind = "allToAll" | "allGather" | "reduceScatter" | "allReduce" | "broadcast" | "barrier" | "send" | "recv";

export const OP_KINDS: readonly OpKind[] = ["allToAll", "allGather", "reduceScatter", "allReduce", "broadcast", "barrier", "send", "recv"];

/** Exact counts for one kind of operation on one rank. */
export interface OpStats {
  calls: number;
  /** Bytes this rank sent to other ranks (its own share to itself is not counted). */
  bytesSent: number;
  /** Bytes this rank received from other ranks. */
  bytesReceived: number;
  /** Elements of the caller's input tensors. */
  elements: number;
  /** Wall time from call to completion, in milliseconds. */
  timeMs: number;
}

export interface CommStats {
  byOp: Record<OpKind, OpStats>;
  total: OpStats;
}

export interface AllToAllOptions {
  /** Rows of input axis 0 to send to each rank (default: equal split). */
  inputSplits?: readonly number[];
  /** Rows of output axis 0 received from each rank (default: equal split). */
  outputSplits?: readonly number[];
  /** Caller-provided output (no allocation). */
  output?: Tensor;
}

export interface AllGatherOptions {
  /** Rows of axis 0 contributed by each rank (default: all equal to this rank's rows). */
  sizes?: readonly number[];
  output?: Tensor;
}

export interface ReduceScatterOptions {
  op?: ReduceOp;
  /** Rows of input axis 0 that each rank receives reduced (default: equal split). */
  sizes?: readonly number[];
  output?: Tensor;
}

export interface ProcessGroup {
  /** This rank's index within the group. */
  readonly rank: number;
  /** Number of ranks in the group. */
  readonly size: number;
  /** The world ranks of this group's members, in group-rank order. */
  readonly worldRanks: readonly number[];
  /** Name of the backend that implements this group. */
  readonly backend: string;

  /** Exchanges axis-0 chunks: chunk j of the input goes to rank j; the output concatenates chunks from ranks 0..P-1. */
  allToAll(input: CommBuffer, options?: AllToAllOptions): Promise<Tensor>;
  /** Concatenates every rank's input along axis 0. */
  allGather(input: CommBuffer, options?: AllGatherOptions): Promise<Tensor>;
  /** Reduces the inputs elementwise and scatters axis-0 chunks: rank r gets chunk r. */
  reduceScatter(input: CommBuffer, options?: ReduceScatterOptions): Promise<Tensor>;
  /** Reduces elementwise across ranks, in place; resolves with the same tensor. */
  allReduce(tensor: CommBuffer, options?: { op?: ReduceOp }): Promise<Tensor>;
  /** Copies root's tensor into every rank's tensor, in place. */
  broadcast(tensor: CommBuffer, options: { root: number }): Promise<Tensor>;
  barrier(): Promise<void>;
  /** Point-to-point: sends to group rank `peer`; matched by a recv with the same tag. */
  send(tensor: CommBuffer, peer: number, tag?: number): Promise<void>;
  /** Receives into `tensor` from group rank `peer`. */
  recv(tensor: CommBuffer, peer: number, tag?: number): Promise<Tensor>;

  /** Creates a sub-group of the given group ranks. Collective over this group: every rank calls it with the same ranks; non-members get null. */
  newGroup(ranks: readonly number[]): Promise<ProcessGroup | null>;

  stats(): CommStats;
  resetStats(): void;
  /** Releases the group's resources. */
  destroy(): Promise<void>;
}

/** Options every backend factory receives; backends may read more keys. */
export interface BackendInitOptions {
  /** Milliseconds a blocking wait may last before the group fails (default 10 000). */
  timeoutMs?: number;
  [key: string]: unknown;
}

/** Creates this process's (or worker's) world group. */
export type BackendFactory = (options: BackendInitOptions) => Promise<ProcessGroup>;

export type { DType };
