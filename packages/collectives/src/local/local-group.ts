/**
 * The "local" backend: every rank of the world lives in this thread and the
 * caller drives rank r with groups[r] (e.g. `Promise.all(groups.map(run))`).
 * A collective completes when all ranks of the group have called it; data
 * moves by plain copies (`executePlan`). It is the reference definition of
 * every op: validation (`planOp`), accounting (`trafficOf`) and results that
 * the other backends are tested against. A rank that does not call within
 * `timeoutMs` makes the others reject naming it, and the group then fails
 * every later call. Sends are synchronous: they complete when matched.
 */
import type { Tensor } from "@ulysses/tensors";
import { copyElements } from "../buffer.js";
import { CollectiveError } from "../errors.js";
import { GroupBase, type Exchanged } from "../group-base.js";
import { checkP2P, planOp, type OpHeader, type P2PHeader } from "../plan.js";
import type { ProcessGroup } from "../types.js";
import { executePlan } from "./execute.js";

export interface LocalGroupsOptions {
  /** Milliseconds a rank waits for the others before the group fails (default 10 000). */
  timeoutMs?: number;
}

interface Arrival {
  header: OpHeader;
  input: Tensor | null;
  output: Tensor | null;
  resolve(done: Exchanged): void;
  reject(error: Error): void;
}

interface Rendezvous {
  arrivals: (Arrival | undefined)[];
  count: number;
  timer: ReturnType<typeof setTimeout>;
}

interface Mail {
  header: P2PHeader;
  tensor: Tensor | null;
  resolve(): void;
  reject(error: Error): void;
  timer: ReturnType<typeof setTimeout>;
}

/** State shared by the member views of one group. */
class LocalGroupState {
  failure: string | null = null;
  private calls = new Map<number, Rendezvous>();
  private sends = new Map<string, Mail[]>();
  private recvs = new Map<string, Mail[]>();

  constructor(
    readonly worldRanks: readonly number[],
    readonly timeoutMs: number,
  ) {}

  get size(): number {
    return this.worldRanks.length;
  }

  private fail(message: string): void {
    this.failure ??= message;
  }

  private aborted(): CollectiveError {
    return new CollectiveError(`group of world ranks [${this.worldRanks.join(", ")}] failed earlier: ${this.failure}`);
  }

  arrive(rank: number, arrival: Arrival, views: (rank: number, state: LocalGroupState) => ProcessGroup): void {
    if (this.failure !== null) {
      arrival.reject(this.aborted());
      return;
    }
    const seq = arrival.header.seq;
    let rv = this.calls.get(seq);
    if (!rv) {
      const created: Rendezvous = { arrivals: new Array(this.size).fill(undefined), count: 0, timer: setTimeout(() => this.timeout(seq), this.timeoutMs) };
      rv = created;
      this.calls.set(seq, rv);
    }
    rv.arrivals[rank] = arrival;
    rv.count += 1;
    if (rv.count < this.size) return;
    clearTimeout(rv.timer);
    this.calls.delete(seq);
    this.complete(rv.arrivals as Arrival[], views);
  }

  private timeout(seq: number): void {
    const rv = this.calls.get(seq);
    if (!rv) return;
    this.calls.delete(seq);
    const present = rv.arrivals.find((a) => a)!;
    const missing = rv.arrivals.flatMap((a, r) => (a ? [] : [r]));
    const message = `${present.header.op} (call ${seq} on group of world ranks [${this.worldRanks.join(", ")}]): rank(s) ${missing.join(", ")} did not call within ${this.timeoutMs} ms`;
    this.fail(message);
    for (const a of rv.arrivals) a?.reject(new CollectiveError(message));
  }

  private complete(arrivals: Arrival[], views: (rank: number, state: LocalGroupState) => ProcessGroup): void {
    const verdict = planOp(
      arrivals.map((a) => a.header),
      this.worldRanks,
    );
    if (!verdict.ok) {
      for (const a of arrivals) a.reject(new CollectiveError(verdict.message));
      return;
    }
    const plan = verdict.plan;
    if (plan.op === "newGroup") {
      const child = new LocalGroupState(
        plan.ranks.map((r) => this.worldRanks[r]!),
        this.timeoutMs,
      );
      arrivals.forEach((a, r) => {
        const index = plan.ranks.indexOf(r);
        a.resolve({ plan, result: null, child: index < 0 ? null : views(index, child) });
      });
      return;
    }
    const results = executePlan(
      plan,
      arrivals.map((a) => a.input),
      arrivals.map((a) => a.output),
    );
    arrivals.forEach((a, r) => a.resolve({ plan, result: results[r]! }));
  }

  /** Queues one side of a point-to-point message from `src` to `dst`; matches in FIFO order. */
  post(side: "send" | "recv", src: number, dst: number, header: P2PHeader, tensor: Tensor | null): Promise<void> {
    if (this.failure !== null) return Promise.reject(this.aborted());
    const key = `${src}>${dst}`;
    return new Promise<void>((resolve, reject) => {
      const queues = side === "send" ? this.sends : this.recvs;
      const queue = queues.get(key) ?? [];
      queues.set(key, queue);
      const mail: Mail = {
        header,
        tensor,
        resolve,
        reject,
        timer: setTimeout(() => {
          const at = queue.indexOf(mail);
          if (at < 0) return;
          queue.splice(at, 1);
          const waiting = side === "send" ? `rank ${dst} did not receive` : `rank ${src} did not send`;
          const message = `${side} from rank ${src} to rank ${dst} (tag ${header.tag}) on group of world ranks [${this.worldRanks.join(", ")}]: ${waiting} within ${this.timeoutMs} ms`;
          this.fail(message);
          reject(new CollectiveError(message));
        }, this.timeoutMs),
      };
      queue.push(mail);
      this.match(key, src, dst);
    });
  }

  private match(key: string, src: number, dst: number): void {
    const sends = this.sends.get(key);
    const recvs = this.recvs.get(key);
    if (!sends?.length || !recvs?.length) return;
    const s = sends.shift()!;
    const r = recvs.shift()!;
    clearTimeout(s.timer);
    clearTimeout(r.timer);
    const mismatch = checkP2P(s.header, r.header, src, dst);
    if (mismatch) {
      s.reject(new CollectiveError(mismatch));
      r.reject(new CollectiveError(mismatch));
      return;
    }
    copyElements(r.tensor!.data, 0, s.tensor!.data, 0, s.tensor!.size);
    s.resolve();
    r.resolve();
  }
}

/** One rank's view of a local group. */
class LocalGroup extends GroupBase {
  readonly backend = "local";

  constructor(
    readonly rank: number,
    private readonly state: LocalGroupState,
  ) {
    super();
  }

  get size(): number {
    return this.state.size;
  }

  get worldRanks(): readonly number[] {
    return this.state.worldRanks;
  }

  protected exchange(header: OpHeader, input: Tensor | null, output: Tensor | null): Promise<Exchanged> {
    return new Promise((resolve, reject) => {
      this.state.arrive(this.rank, { header, input, output, resolve, reject }, (rank, state) => new LocalGroup(rank, state));
    });
  }

  protected sendTo(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void> {
    return this.state.post("send", this.rank, peer, header, tensor);
  }

  protected recvFrom(header: P2PHeader, tensor: Tensor | null, peer: number): Promise<void> {
    return this.state.post("recv", peer, this.rank, header, tensor);
  }

  protected async release(): Promise<void> {}
}

/** Creates the `worldSize` rank views of one in-thread world (backend "local"). */
export function createLocalGroups(worldSize: number, options: LocalGroupsOptions = {}): ProcessGroup[] {
  if (!Number.isInteger(worldSize) || worldSize < 1) throw new CollectiveError(`createLocalGroups: worldSize ${worldSize} must be a positive integer`);
  const timeoutMs = options.timeoutMs ?? 10_000;
  if (!(timeoutMs > 0)) throw new CollectiveError(`createLocalGroups: timeoutMs ${timeoutMs} must be positive`);
  const state = new LocalGroupState(
    Array.from({ length: worldSize }, (_, r) => r),
    timeoutMs,
  );
  return Array.from({ length: worldSize }, (_, r) => new LocalGroup(r, state));
}
