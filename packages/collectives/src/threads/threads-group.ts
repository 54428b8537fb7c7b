/**
 * The "threads" backend's ProcessGroup: ranks are worker threads of one
 * process sharing the buffers of `shared-layout.ts`. One collective call on
 * rank r (call number s, parity s % 2):
 *
 * 1. stage: copy the part of the input peers will read into outbox[r][parity];
 * 2. write the JSON header into header slot [parity][r];
 * 3. arrive: counter[r] = ++epoch, wake every member; wait for all counters;
 * 4. read all headers, `planOp` them (same verdict on every rank: a mismatch
 *    rejects everywhere with the same text);
 * 5. copy the result out of the peers' outboxes into ordinary memory
 *    (allReduce: reduce chunk r into outbox[r], arrive and wait again, then
 *    copy all reduced chunks).
 *
 * Two parities make one synchronisation per call enough: a rank can only
 * write parity p again (call s + 2) after every peer arrived at call s + 1,
 * i.e. finished reading call s. Point-to-point messages use a per-pair
 * mailbox and the sender's p2p outbox; a send completes when the receiver has
 * copied the data (or rejected it: then both sides reject with one text).
 */
import type { Tensor } from "@ulysses/tensors";
import { copyElements, storageView } from "../buffer.js";
import { CollectiveError } from "../errors.js";
import { GroupBase, type Exchanged } from "../group-base.js";
import { checkP2P, clipText, planOp, type OpHeader, type P2PHeader } from "../plan.js";
import type { ProcessGroup } from "../types.js";
import { collectChunks, gather, reduceOwnChunk, stage } from "./move.js";
import { GroupLayout, ensureCapacity, readText, writeText, type GroupResources, type WorldControl } from "./shared-layout.js";
import { abortedError, waitUntil, type WaitContext } from "./wait.js";

/** What a rank's groups share: the world control and how to obtain a sub-group's buffers. */
export interface ThreadsRuntime {
  world: WorldControl;
  worldRank: number;
  timeoutMs: number;
  joinGroup(key: string, worldRanks: number[]): Promise<GroupResources>;
}

const utf8 = new TextEncoder();
const SEND = 0;
const ACK = 1;
const STATUS = 2;

export class ThreadsGroup extends GroupBase {
  readonly backend = "threads";
  readonly size: number;
  readonly worldRanks: readonly number[];
  private readonly layout: GroupLayout;
  private readonly counters: Int32Array;
  private epoch = 0;
  private readonly sent: number[];
  private readonly received: number[];
  private readonly label: string;

  constructor(
    private readonly runtime: ThreadsRuntime,
    private readonly resources: GroupResources,
    readonly rank: number,
  ) {
    super();
    this.size = resources.worldRanks.length;
    this.worldRanks = Object.freeze([...resources.worldRanks]);
    this.layout = new GroupLayout(this.size);
    this.counters = new Int32Array(resources.control, 0, this.size);
    this.sent = new Array<number>(this.size).fill(0);
    this.received = new Array<number>(this.size).fill(0);
    this.label = `group of world ranks [${this.worldRanks.join(", ")}]`;
  }

  private waitContext(what: string): WaitContext {
    return { world: this.runtime.world, worldRank: this.runtime.worldRank, timeoutMs: this.runtime.timeoutMs, what };
  }

  private checkAbort(what: string): void {
    if (this.runtime.world.aborted) throw abortedError(this.runtime.world, what);
  }

  private wakeMembers(): void {
    for (const w of this.worldRanks) if (w !== this.runtime.worldRank) this.runtime.world.wake(w);
  }

  /** Arrives at the next synchronisation point and waits for every member. */
  private async arriveAndWait(what: string): Promise<void> {
    const epoch = ++this.epoch;
    Atomics.store(this.counters, this.rank, epoch);
    this.wakeMembers();
    const late = () => this.worldRanks.filter((_, j) => Atomics.load(this.counters, j) < epoch);
    await waitUntil(this.waitContext(what), () => late().length === 0, late, "arrive");
  }

  protected async exchange(header: OpHeader, input: Tensor | null, output: Tensor | null): Promise<Exchanged> {
    const what = `${header.op} (call ${header.seq} on ${this.label})`;
    this.checkAbort(what);
    const parity = header.seq & 1;
    const outboxes = this.resources.outboxes.map((pair) => pair[parity]!);
    try {
      stage(header, input, outboxes[this.rank]!, this.rank, this.size);
    } catch (e) {
      header = { ...header, error: (e as Error).message };
    }
    const control = this.resources.control;
    const slot = this.layout.slot(parity, this.rank);
    const json = JSON.stringify(header);
    if (!writeText(control, slot, this.layout.slotBytes, json)) {
      // every rank learns why from this rank's header (never a silent drop)
      const error = clipText(
        `the call header of ${utf8.encode(json).length} bytes does not fit the threads backend's ${this.layout.slotBytes - 4}-byte header slot`,
        512,
      );
      writeText(control, slot, this.layout.slotBytes, JSON.stringify({ op: header.op, seq: header.seq, error }));
    }
    await this.arriveAndWait(what);
    const headers = this.worldRanks.map((_, j) => JSON.parse(readText(control, this.layout.slot(parity, j))) as OpHeader);
    const verdict = planOp(headers, this.worldRanks);
    if (!verdict.ok) throw new CollectiveError(verdict.message);
    const plan = verdict.plan;
    switch (plan.op) {
      case "barrier":
        return { plan, result: null };
      case "newGroup": {
        const index = plan.ranks.indexOf(this.rank);
        if (index < 0) return { plan, result: null, child: null };
        const key = `${this.resources.key}/${header.seq}`;
        const resources = await this.runtime.joinGroup(
          key,
          plan.ranks.map((r) => this.worldRanks[r]!),
        );
        const child: ProcessGroup = new ThreadsGroup(this.runtime, resources, index);
        return { plan, result: null, child };
      }
      case "allReduce":
        reduceOwnChunk(plan, this.rank, input!, outboxes);
        await this.arriveAndWait(what);
        collectChunks(plan, input!, outboxes);
        return { plan, result: input };
      default:
        return { plan, result: gather(plan, this.rank, input!, output, outboxes) };
    }
  }

  private mailbox(src: number, dst: number): { words: Int32Array; text: number } {
    const offset = this.layout.mailbox(src, dst);
    return { words: new Int32Array(this.resources.control, offset, 4), text: offset + 16 };
  }

  /** Bytes of JSON (plus its 4-byte length) a mailbox carries. */
  private get mailboxText(): number {
    return this.layout.mailboxBytes - 16;
  }

  protected async sendTo(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void> {
    const what = `send from rank ${this.rank} to rank ${peer} (tag ${header.tag}) on ${this.label}`;
    this.checkAbort(what);
    const seq = ++this.sent[peer]!;
    const box = this.mailbox(this.rank, peer);
    let offer = header;
    if (tensor && !offer.error) {
      try {
        const outbox = this.resources.p2pOutboxes[this.rank]!;
        ensureCapacity(outbox, tensor.byteLength);
        copyElements(storageView(tensor.data, outbox, 0, tensor.size), 0, tensor.data, 0, tensor.size);
      } catch (e) {
        offer = { ...header, error: (e as Error).message };
      }
    }
    let json = JSON.stringify(offer);
    const bytes = utf8.encode(json).length;
    if (bytes + 4 > this.mailboxText) {
      // a tensor of very many axes: tell the receiver instead of dropping the header
      const error = `the send header of ${bytes} bytes (a tensor of ${header.shape.length} axes) does not fit the threads backend's ${this.mailboxText - 4}-byte mailbox`;
      json = JSON.stringify({ dtype: header.dtype, shape: [0], tag: header.tag, error: clipText(error, this.mailboxText / 2) } satisfies P2PHeader);
    }
    if (!writeText(this.resources.control, box.text, this.mailboxText, json))
      throw new Error(`threads backend: a p2p header of ${json.length} characters does not fit its mailbox`);
    Atomics.store(box.words, SEND, seq);
    this.runtime.world.wake(this.worldRanks[peer]!);
    await waitUntil(
      this.waitContext(what),
      () => Atomics.load(box.words, ACK) >= seq,
      () => [this.worldRanks[peer]!],
      "receive",
    );
    if (Atomics.load(box.words, STATUS) !== 0) throw new CollectiveError(readText(this.resources.control, box.text));
  }

  protected async recvFrom(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void> {
    const what = `recv on rank ${this.rank} from rank ${peer} (tag ${header.tag}) on ${this.label}`;
    this.checkAbort(what);
    const seq = ++this.received[peer]!;
    const box = this.mailbox(peer, this.rank);
    await waitUntil(
      this.waitContext(what),
      () => Atomics.load(box.words, SEND) >= seq,
      () => [this.worldRanks[peer]!],
      "send",
    );
    const text = readText(this.resources.control, box.text);
    let offered: P2PHeader;
    try {
      offered = JSON.parse(text) as P2PHeader;
    } catch {
      offered = { dtype: "uint8", shape: [0], tag: 0, error: `unreadable send header (${text.length} characters)` };
    }
    let mismatch = checkP2P(offered, header, peer, this.rank);
    if (mismatch) {
      // the sender rejects with exactly this text, clipped to the mailbox
      mismatch = clipText(mismatch, this.mailboxText - 4);
      writeText(this.resources.control, box.text, this.mailboxText, mismatch);
    } else {
      copyElements(tensor!.data, 0, storageView(tensor!.data, this.resources.p2pOutboxes[peer]!, 0, tensor!.size), 0, tensor!.size);
    }
    Atomics.store(box.words, STATUS, mismatch ? 1 : 0);
    Atomics.store(box.words, ACK, seq);
    this.runtime.world.wake(this.worldRanks[peer]!);
    if (mismatch) throw new CollectiveError(mismatch);
  }

  protected async release(): Promise<void> {}
}
