/**
 * What every ProcessGroup implementation of this package shares: turning
 * calls into headers, running one operation at a time per group on this rank
 * (operations complete in call order, as torch's work queue does), stamping
 * sequence numbers, and recording exact stats. Subclasses only exchange
 * headers and move data (`exchange`, `sendTo`, `recvFrom`).
 *
 * Bad arguments never throw here before the exchange: they travel in the
 * header (`error`) so every rank of a collective rejects with the same
 * CollectiveError naming the rank and the reason, at once. Point-to-point
 * calls are not collective: a bad tensor or tag travels in the p2p header
 * and both sides reject with one text; a peer that is not another rank of
 * the group rejects on the calling rank only (no rank can be the other side
 * of that message). A recv from a rank that never sends waits for the
 * group's timeout by design, as does any call that a peer never makes.
 * destroy() is local to this rank: every rank destroys its own view, and a
 * call on a destroyed view rejects at once on that rank (a peer still
 * calling the group then waits for the timeout).
 */
import type { Tensor } from "@ulysses/tensors";
import {
  describeAllGather,
  describeAllReduce,
  describeAllToAll,
  describeBroadcast,
  describeNewGroup,
  describeP2P,
  describeReduceScatter,
  type DescribedCall,
} from "./call.js";
import { CollectiveError } from "./errors.js";
import type { OpHeader, P2PHeader, Plan } from "./plan.js";
import { StatsRecorder, trafficOf } from "./stats.js";
import type { AllGatherOptions, AllToAllOptions, CommBuffer, CommStats, ProcessGroup, ReduceOp, ReduceScatterOptions } from "./types.js";

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
  /**
   * Point-to-point, one side each: exchange headers with `peer` first; when
   * `checkP2P(send, recv)` reports a message (a mismatch, or either side's
   * `header.error`), both sides reject with it and no data moves. `tensor` is
   * null exactly when `header.error` is set.
   */
  protected abstract sendTo(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void>;
  protected abstract recvFrom(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void>;
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

  async allToAll(input: CommBuffer, options?: AllToAllOptions): Promise<Tensor> {
    return (await this.collective(describeAllToAll(input, options, this.size))).result!;
  }

  async allGather(input: CommBuffer, options?: AllGatherOptions): Promise<Tensor> {
    return (await this.collective(describeAllGather(input, options, this.size))).result!;
  }

  async reduceScatter(input: CommBuffer, options?: ReduceScatterOptions): Promise<Tensor> {
    return (await this.collective(describeReduceScatter(input, options, this.size))).result!;
  }

  async allReduce(tensor: CommBuffer, options?: { op?: ReduceOp }): Promise<Tensor> {
    return (await this.collective(describeAllReduce(tensor, options))).result!;
  }

  async broadcast(tensor: CommBuffer, options: { root: number }): Promise<Tensor> {
    return (await this.collective(describeBroadcast(tensor, options, this.size))).result!;
  }

  async barrier(): Promise<void> {
    await this.collective({ header: { op: "barrier" }, input: null, output: null });
  }

  async newGroup(ranks: readonly number[]): Promise<ProcessGroup | null> {
    return (await this.collective({ header: describeNewGroup(ranks, this.size), input: null, output: null })).child ?? null;
  }

  private async p2p(kind: "send" | "recv", buffer: CommBuffer, peer: number, tag: unknown): Promise<Tensor | null> {
    const start = performance.now();
    const call = describeP2P(kind, buffer, peer, tag, this.rank, this.size);
    return this.serial(async () => {
      this.checkAlive(kind);
      if (call.peerError) throw new CollectiveError(call.peerError);
      const { header, tensor } = call;
      if (kind === "send") await this.sendTo(header, tensor, peer);
      else await this.recvFrom(header, tensor, peer);
      // a backend must reject a call whose header carries an error; never move on without a tensor
      if (!tensor) throw new CollectiveError(`${kind} on rank ${this.rank}: ${header.error}`);
      const bytes = tensor.byteLength;
      this.recorder.record(
        kind,
        kind === "send" ? { bytesSent: bytes, bytesReceived: 0 } : { bytesSent: 0, bytesReceived: bytes },
        tensor.size,
        performance.now() - start,
      );
      return tensor;
    });
  }

  async send(tensor: CommBuffer, peer: number, tag = 0): Promise<void> {
    await this.p2p("send", tensor, peer, tag);
  }

  async recv(tensor: CommBuffer, peer: number, tag = 0): Promise<Tensor> {
    return (await this.p2p("recv", tensor, peer, tag))!;
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
