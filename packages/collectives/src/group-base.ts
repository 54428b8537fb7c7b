/**
 * What every ProcessGroup implementation of this package shares: turning
 * calls into headers, running one operation at a time per group on this rank
 * (operations complete in call order, as torch's work queue does), stamping
 * sequence numbers, and recording exact stats. Subclasses only exchange
 * headers and move data (`exchange`, `sendTo`, `recvFrom`).
 */
import type { Tensor } from "@ulysses/tensors";
import { asTensor } from "./buffer.js";
import { describeAllGather, describeAllReduce, describeAllToAll, describeBroadcast, describeReduceScatter, type DescribedCall } from "./call.js";
import { CollectiveError } from "./errors.js";
import type { OpHeader, Plan } from "./plan.js";
import { StatsRecorder, trafficOf } from "./stats.js";
import type { AllGatherOptions, AllToAllOptions, Buffer, CommStats, ProcessGroup, ReduceOp, ReduceScatterOptions } from "./types.js";

export interface Exchanged {
  plan: Plan;
  /** The output tensor (data-moving ops), or null. */
  result: Tensor | null;
  /** For newGroup: the sub-group of this rank, or null when it is not a member. */
  child?: ProcessGroup | null;
}

export abstract class GroupBase implements ProcessGroup {
  abstract readonly rank: number;
  abstract readonly size: number;
  abstract readonly worldRanks: readonly number[];
  abstract readonly backend: string;

  protected readonly recorder = new StatsRecorder();
  private chain: Promise<unknown> = Promise.resolve();
  private seq = 0;
  protected destroyed = false;

  /** Exchanges headers with every rank, validates with `planOp`, moves the data. */
  protected abstract exchange(header: OpHeader, input: Tensor | null, output: Tensor | null): Promise<Exchanged>;
  protected abstract sendTo(tensor: Tensor, peer: number, tag: number): Promise<void>;
  protected abstract recvFrom(tensor: Tensor, peer: number, tag: number): Promise<void>;
  protected abstract release(): Promise<void>;

  /** Runs `fn` after every operation this rank started earlier on this group. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  private checkAlive(what: string): void {
    if (this.destroyed) throw new CollectiveError(`${what} on a destroyed group (world ranks [${this.worldRanks.join(", ")}])`);
  }

  private collective(call: DescribedCall): Promise<Exchanged> {
    const start = performance.now();
    return this.serial(async () => {
      this.checkAlive(call.header.op);
      const header: OpHeader = { ...call.header, seq: ++this.seq };
      const done = await this.exchange(header, call.input, call.output);
      if (done.plan.op !== "newGroup") {
        this.recorder.record(done.plan.op, trafficOf(done.plan, this.rank), call.input?.size ?? 0, performance.now() - start);
      }
      return done;
    });
  }

  async allToAll(input: Buffer, options?: AllToAllOptions): Promise<Tensor> {
    return (await this.collective(describeAllToAll(input, options))).result!;
  }

  async allGather(input: Buffer, options?: AllGatherOptions): Promise<Tensor> {
    return (await this.collective(describeAllGather(input, options))).result!;
  }

  async reduceScatter(input: Buffer, options?: ReduceScatterOptions): Promise<Tensor> {
    return (await this.collective(describeReduceScatter(input, options))).result!;
  }

  async allReduce(tensor: Buffer, options: { op?: ReduceOp } = {}): Promise<Tensor> {
    return (await this.collective(describeAllReduce(tensor, options.op))).result!;
  }

  async broadcast(tensor: Buffer, options: { root: number }): Promise<Tensor> {
    return (await this.collective(describeBroadcast(tensor, options?.root))).result!;
  }

  async barrier(): Promise<void> {
    await this.collective({ header: { op: "barrier" }, input: null, output: null });
  }

  async newGroup(ranks: readonly number[]): Promise<ProcessGroup | null> {
    const header = Array.isArray(ranks) ? { op: "newGroup" as const, ranks: [...ranks] } : { op: "newGroup" as const, error: `ranks must be an array, got ${String(ranks)}` };
    return (await this.collective({ header, input: null, output: null })).child ?? null;
  }

  private p2p(kind: "send" | "recv", buffer: Buffer, peer: number, tag: number, move: (t: Tensor) => Promise<void>): Promise<void> {
    const start = performance.now();
    const tensor = asTensor(buffer);
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      throw new CollectiveError(`${kind} on rank ${this.rank}: peer ${peer} must be another rank of the group of ${this.size}`);
    }
    if (!Number.isInteger(tag)) throw new CollectiveError(`${kind} on rank ${this.rank}: tag ${tag} must be an integer`);
    return this.serial(async () => {
      this.checkAlive(kind);
      await move(tensor);
      const bytes = tensor.byteLength;
      this.recorder.record(kind, kind === "send" ? { bytesSent: bytes, bytesReceived: 0 } : { bytesSent: 0, bytesReceived: bytes }, tensor.size, performance.now() - start);
    });
  }

  async send(tensor: Buffer, peer: number, tag = 0): Promise<void> {
    await this.p2p("send", tensor, peer, tag, (t) => this.sendTo(t, peer, tag));
  }

  async recv(tensor: Buffer, peer: number, tag = 0): Promise<Tensor> {
    let result: Tensor | undefined;
    await this.p2p("recv", tensor, peer, tag, async (t) => {
      await this.recvFrom(t, peer, tag);
      result = t;
    });
    return result!;
  }

  stats(): CommStats {
    return this.recorder.stats();
  }

  resetStats(): void {
    this.recorder.reset();
  }

  async destroy(): Promise<void> {
    if (this.destroyed) return;
    await this.serial(async () => {
      this.destroyed = true;
      await this.release();
    });
  }
}
