/**
 * MpiGroup: a ProcessGroup over one MPI communicator. GroupBase (from
 * @ulysses/collectives) turns calls into headers, runs one operation at a
 * time in call order and records stats; this class exchanges the headers
 * (HeaderExchange), validates them with the shared planOp, and moves data
 * with moves.ts / reductions.ts on the group's own lane (a native thread), so
 * the event loop stays free while MPI blocks. Point-to-point messages are
 * synchronous like the reference backend's: the receiver checks the sender's
 * header, answers, and only then does the data travel, so a mismatch rejects
 * on both sides with the same text. A native failure or a timeout fails the
 * group: every later call rejects with the first cause. A timed-out call may
 * never return from MPI: its lane is abandoned (it no longer keeps the
 * process alive), destroy() then frees nothing and does not finalize, and the
 * exit hook (lifecycle.ts) aborts the job with a line naming the rank and the
 * failure, instead of a hang or a native crash.
 */
import { CollectiveError, type ProcessGroup } from "@ulysses/collectives";
import { checkP2P, clipText, GroupBase, planOp, type Exchanged, type OpHeader, type P2PHeader } from "@ulysses/collectives/backend";
import type { Tensor } from "@ulysses/tensors";
import type { NativeMpi } from "./addon.js";
import { Scratch, type Channel } from "./channel.js";
import { MpiError } from "./errors.js";
import { HeaderExchange } from "./headers.js";
import { finalizeMpi, noteFailure } from "./lifecycle.js";
import { allGather, allToAll, broadcast } from "./moves.js";
import { allReduce, reduceScatter, type ReductionMode } from "./reductions.js";

export interface MpiGroupInit {
  native: NativeMpi;
  /** Communicator id for collectives and p2p data. */
  comm: number;
  /** A duplicate of `comm` for p2p headers and answers. */
  control: number;
  lane: number;
  worldRanks: readonly number[];
  timeoutMs: number;
  reduction: ReductionMode;
  isWorld: boolean;
}

const P2P_SLOT = 1024;
const HEADER_TAG = 0;
const ANSWER_TAG = 1;
/** Data goes on the group's communicator under one tag: the user's tag was matched in the header. */
const DATA_TAG = 2;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class MpiGroup extends GroupBase {
  readonly rank: number;
  readonly size: number;
  readonly worldRanks: readonly number[];
  readonly backend = "mpi";
  /** How allReduce and reduceScatter combine values (see reductions.ts). */
  readonly reduction: ReductionMode;

  private readonly init: MpiGroupInit;
  private readonly channel: Channel;
  private readonly headers: HeaderExchange;
  private readonly slot = new Uint8Array(P2P_SLOT);
  private failure: string | null = null;

  constructor(init: MpiGroupInit) {
    super();
    this.init = init;
    const info = init.native.commInfo(init.comm);
    this.rank = info.rank;
    this.size = info.size;
    this.worldRanks = Object.freeze([...init.worldRanks]);
    this.reduction = init.reduction;
    this.channel = {
      native: init.native,
      lane: init.lane,
      comm: init.comm,
      rank: this.rank,
      size: this.size,
      scratch: new Scratch(),
      run: (what, call) => this.run(what, call),
    };
    this.headers = new HeaderExchange(this.channel);
  }

  /** True once destroy() has run. */
  get isDestroyed(): boolean {
    return this.destroyed;
  }

  private describe(): string {
    return `group of world ranks [${this.worldRanks.join(", ")}]`;
  }

  /** One native call under the timeout; a failure or timeout fails the whole group. */
  private async run<T>(what: string, call: () => Promise<T>): Promise<T> {
    if (this.failure !== null) throw new MpiError(`${this.describe()} failed earlier: ${this.failure}`);
    const { timeoutMs } = this.init;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let timedOut = false;
    const timeout = new Promise<never>((_, reject) => {
      if (timeoutMs > 0 && Number.isFinite(timeoutMs)) {
        timer = setTimeout(() => {
          timedOut = true;
          reject(
            new MpiError(
              `rank ${this.rank}: ${what} on ${this.describe()} did not complete within ${timeoutMs} ms (a peer is not calling it, or is stuck or dead); the group is unusable now`,
            ),
          );
        }, timeoutMs);
      }
    });
    try {
      return await Promise.race([call(), timeout]);
    } catch (error) {
      const wrapped =
        error instanceof MpiError
          ? error
          : new MpiError(`rank ${this.rank}: ${what} on ${this.describe()} failed: ${(error as Error).message}`, { cause: error });
      this.failure ??= wrapped.message;
      noteFailure(wrapped.message);
      // the native call may never return (a peer never joins): it must not keep the process alive
      if (timedOut) this.init.native.abandonLane(this.init.lane);
      throw wrapped;
    } finally {
      clearTimeout(timer);
    }
  }

  protected async exchange(header: OpHeader, input: Tensor | null, output: Tensor | null): Promise<Exchanged> {
    const headers = await this.headers.exchange(header);
    const planned = planOp(headers, this.worldRanks);
    if (!planned.ok) throw new CollectiveError(planned.message);
    const plan = planned.plan;
    switch (plan.op) {
      case "allToAll":
        return { plan, result: await allToAll(this.channel, plan, input!, output) };
      case "allGather":
        return { plan, result: await allGather(this.channel, plan, input!, output) };
      case "reduceScatter":
        return { plan, result: await reduceScatter(this.channel, plan, input!, output, this.reduction) };
      case "allReduce":
        return { plan, result: await allReduce(this.channel, plan, input!, this.reduction) };
      case "broadcast":
        return { plan, result: await broadcast(this.channel, plan, input!) };
      case "barrier":
        // The header allgather already completed on every rank: that is the barrier.
        return { plan, result: null };
      case "newGroup":
        return { plan, result: null, child: await this.split(plan.ranks) };
    }
  }

  /** MPI_Comm_split into the members of `ranks` (ordered as given) and the rest (no group). */
  private async split(ranks: readonly number[]): Promise<ProcessGroup | null> {
    const { native, lane, comm } = this.init;
    const index = ranks.indexOf(this.rank);
    const created = await this.run("newGroup", () => native.commSplit(lane, comm, index < 0 ? -1 : 0, Math.max(index, 0)));
    if (created < 0) return null;
    const childLane = native.createLane();
    const control = await this.run("newGroup", () => native.commDup(childLane, created));
    return new MpiGroup({ ...this.init, comm: created, control, lane: childLane, worldRanks: ranks.map((r) => this.worldRanks[r]!), isWorld: false });
  }

  /** A p2p slot holding `value` as JSON; null when it does not fit. */
  private encode(value: object): Uint8Array | null {
    const bytes = encoder.encode(JSON.stringify(value));
    if (bytes.length > P2P_SLOT - 4) return null;
    const out = new Uint8Array(P2P_SLOT);
    new DataView(out.buffer).setUint32(0, bytes.length, true);
    out.set(bytes, 4);
    return out;
  }

  private decode<T>(slot: Uint8Array): T | null {
    const length = new DataView(slot.buffer, slot.byteOffset).getUint32(0, true);
    try {
      return JSON.parse(decoder.decode(slot.subarray(4, 4 + Math.min(length, P2P_SLOT - 4)))) as T;
    } catch {
      return null;
    }
  }

  protected async sendTo(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void> {
    const { native, lane, comm, control } = this.init;
    // a header too long for the slot (a tensor of very many axes) is replaced by one naming the problem: the receiver rejects too
    const offer =
      this.encode(header) ??
      this.encode({
        dtype: header.dtype,
        shape: [0],
        tag: header.tag,
        error: `the send header (a tensor of ${header.shape.length} axes) does not fit the mpi backend's ${P2P_SLOT - 4}-byte header slot`,
      } satisfies P2PHeader)!;
    await this.run("send", () => native.send(lane, control, offer, peer, HEADER_TAG));
    await this.run("send", () => native.recv(lane, control, this.slot, peer, ANSWER_TAG));
    const answer = this.decode<{ error: string | null }>(this.slot);
    if (answer === null) throw new CollectiveError(`send from rank ${this.rank} to rank ${peer}: unreadable answer from the receiver`);
    if (answer.error !== null) throw new CollectiveError(answer.error);
    await this.run("send", () => native.send(lane, comm, tensor!.data, peer, DATA_TAG));
  }

  protected async recvFrom(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void> {
    const { native, lane, comm, control } = this.init;
    await this.run("recv", () => native.recv(lane, control, this.slot, peer, HEADER_TAG));
    const offer = this.decode<P2PHeader>(this.slot) ?? { dtype: "uint8", shape: [0], tag: 0, error: "unreadable send header" };
    const found = checkP2P(offer, header, peer, this.rank);
    // the sender rejects with exactly this text, clipped until its JSON fits the slot
    let error = found;
    let answer = this.encode({ error });
    for (let max = P2P_SLOT - 16; answer === null; max = Math.floor(max * 0.8)) {
      error = clipText(found!, max);
      answer = this.encode({ error });
    }
    await this.run("recv", () => native.send(lane, control, answer, peer, ANSWER_TAG));
    if (error !== null) throw new CollectiveError(error);
    await this.run("recv", () => native.recv(lane, comm, tensor!.data, peer, DATA_TAG));
  }

  protected async release(): Promise<void> {
    this.channel.scratch.release();
    const { native, lane, comm, control } = this.init;
    if (native.state().finalized) return;
    // After a failure (a timeout above all) an operation of this group may
    // still be inside MPI on its lane: freeing its communicators would block
    // or crash, joining the lane would never return, and MPI_Finalize would
    // wait for it. Leave them; the exit hook aborts the job naming this rank.
    if (this.failure !== null) return;
    if (this.init.isWorld) {
      // MPI_Finalize frees every communicator; it waits for all ranks to
      // finalize. Not with another group's operation still pending: then the
      // exit hook aborts the job instead.
      if (native.state().pendingJobs > 0) return;
      finalizeMpi();
      return;
    }
    await this.run("destroy", () => native.commFree(lane, control));
    await this.run("destroy", () => native.commFree(lane, comm));
    native.destroyLane(lane);
  }
}
