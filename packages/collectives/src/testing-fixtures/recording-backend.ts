/**
 * Test fixture: a user-defined backend that wraps another backend's group
 * and records every call, as a backend author would write one (see README).
 * The default export is a BackendFactory wrapping "threads".
 */
import type { Tensor } from "@ulysses/tensors";
import { getBackend } from "../registry.js";
import type { AllGatherOptions, AllToAllOptions, BackendInitOptions, CommBuffer, CommStats, ProcessGroup, ReduceOp, ReduceScatterOptions } from "../types.js";

export class RecordingGroup implements ProcessGroup {
  readonly backend = "recording";
  readonly calls: string[];

  constructor(
    private readonly inner: ProcessGroup,
    calls: string[] = [],
  ) {
    this.calls = calls;
  }

  get rank() {
    return this.inner.rank;
  }
  get size() {
    return this.inner.size;
  }
  get worldRanks() {
    return this.inner.worldRanks;
  }

  private note<T>(op: string, result: Promise<T>): Promise<T> {
    this.calls.push(op);
    return result;
  }

  allToAll(input: CommBuffer, options?: AllToAllOptions): Promise<Tensor> {
    return this.note("allToAll", this.inner.allToAll(input, options));
  }
  allGather(input: CommBuffer, options?: AllGatherOptions): Promise<Tensor> {
    return this.note("allGather", this.inner.allGather(input, options));
  }
  reduceScatter(input: CommBuffer, options?: ReduceScatterOptions): Promise<Tensor> {
    return this.note("reduceScatter", this.inner.reduceScatter(input, options));
  }
  allReduce(tensor: CommBuffer, options?: { op?: ReduceOp }): Promise<Tensor> {
    return this.note("allReduce", this.inner.allReduce(tensor, options));
  }
  broadcast(tensor: CommBuffer, options: { root: number }): Promise<Tensor> {
    return this.note("broadcast", this.inner.broadcast(tensor, options));
  }
  barrier(): Promise<void> {
    return this.note("barrier", this.inner.barrier());
  }
  send(tensor: CommBuffer, peer: number, tag?: number): Promise<void> {
    return this.note("send", this.inner.send(tensor, peer, tag));
  }
  recv(tensor: CommBuffer, peer: number, tag?: number): Promise<Tensor> {
    return this.note("recv", this.inner.recv(tensor, peer, tag));
  }
  async newGroup(ranks: readonly number[]): Promise<ProcessGroup | null> {
    const child = await this.note("newGroup", this.inner.newGroup(ranks));
    return child && new RecordingGroup(child, this.calls);
  }
  stats(): CommStats {
    return this.inner.stats();
  }
  resetStats(): void {
    this.inner.resetStats();
  }
  destroy(): Promise<void> {
    return this.inner.destroy();
  }
}

/** BackendFactory: the threads world group, recorded. */
export default async function createRecordingBackend(options: BackendInitOptions): Promise<ProcessGroup> {
  return new RecordingGroup(await getBackend("threads")!(options));
}
