/**
 * Conformance checks of bad calls: every argument error of every operation,
 * mostly made on one rank only (rank 1), which is the case a backend gets
 * wrong when it validates locally before talking to its peers. For a
 * collective, every rank must reject with a CollectiveError, within
 * BAD_CALL_BOUND_MS (far below any group timeout: no rank may wait for a peer
 * that already knows the call is bad), with the same message on every rank,
 * naming the rank whose call was bad and the offending value (the checks
 * look for a few such words, not for this package's phrasing); and the group
 * must work afterwards (an allReduce follows every case).
 *
 * Point-to-point calls are not collective. A bad tensor or tag with a valid
 * peer must reject on both sides, with the same message; a peer that is not
 * another rank of the group rejects on the calling rank only, at once (no
 * rank can be on the other side of that message; a recv from a rank that
 * never sends waits for the timeout by design and is not checked here).
 *
 * destroy() is local: a call on a destroyed view rejects at once on that
 * rank. The check destroys a sub-group on every rank, then calls it.
 */
import { Tensor } from "@ulysses/tensors";
import { CollectiveError } from "../errors.js";
import type { ProcessGroup } from "../types.js";
import type { ConformanceCheck } from "./check.js";
import { expectTrue, ranksOf } from "./data.js";
import { BAD_COLLECTIVE_CALLS, type BadCall } from "./checks-bad-calls.js";

export { BAD_COLLECTIVE_CALLS, type BadCall } from "./checks-bad-calls.js";

/** The longest a bad call may take to reject on any rank. */
export const BAD_CALL_BOUND_MS = 2000;

export interface Settled {
  /** The rejection, or null when the call resolved. */
  error: unknown;
  value?: unknown;
  ms: number;
  /** True when it neither resolved nor rejected within the bound. */
  late: boolean;
}

/** Runs `fn` (a synchronous throw counts as a rejection), waiting at most `boundMs`. */
export async function settleWithin(fn: () => unknown, boundMs: number): Promise<Settled> {
  const start = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<Settled>((resolve) => {
    timer = setTimeout(() => resolve({ error: null, ms: performance.now() - start, late: true }), boundMs);
  });
  const run = new Promise<unknown>((resolve) => resolve(fn())).then(
    (v): Settled => ({ error: null, value: v, ms: performance.now() - start, late: false }),
    (e: unknown): Settled => ({ error: e ?? new Error(String(e)), ms: performance.now() - start, late: false }),
  );
  try {
    return await Promise.race([run, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The CollectiveError message of a prompt rejection; throws otherwise. */
export function promptRejection(what: string, s: Settled, boundMs = BAD_CALL_BOUND_MS): string {
  if (s.late) throw new Error(`${what}: did not reject within ${boundMs} ms`);
  if (s.error === null) throw new Error(`${what}: resolved, expected a CollectiveError`);
  const e = s.error as Error;
  if (!(e instanceof CollectiveError))
    throw new Error(`${what}: rejected with ${e?.name ?? typeof e} (${e?.message ?? String(e)}), expected a CollectiveError`);
  return e.message;
}

async function groupStillWorks(group: ProcessGroup, what: string): Promise<void> {
  const t = Int32Array.from([1]);
  const s = await settleWithin(() => group.allReduce(t), BAD_CALL_BOUND_MS);
  if (s.late || s.error !== null)
    throw new Error(
      `${what}: the allReduce after the bad call ${s.late ? `did not complete within ${BAD_CALL_BOUND_MS} ms` : `failed: ${(s.error as Error)?.message}`}`,
    );
  expectTrue(t[0] === group.size, `${what}: allReduce after the bad call gave ${t[0]}, expected ${group.size}`);
}

/**
 * Runs `body` (this rank's part of a check), then gathers every rank's
 * outcome text, so a rank whose own assertion failed still takes part in the
 * comparison (its peers never wait on it); throws this rank's failure first,
 * then any difference between the ranks in `compare`.
 */
async function compareOutcomes(group: ProcessGroup, name: string, body: () => Promise<string>, compare: (texts: string[]) => string | null): Promise<void> {
  let text: string;
  let failure: Error | null = null;
  try {
    text = await body();
  } catch (e) {
    failure = e as Error;
    text = `(rank ${group.rank} failed: ${failure.message})`;
  }
  const texts = await textsOf(group, text);
  if (failure) throw failure;
  const difference = compare(texts);
  if (difference) throw new Error(`${name}: ${difference}`);
}

const allSame = (texts: string[]) => {
  const other = texts.findIndex((t) => t !== texts[0]);
  return other < 0 ? null : `rank 0 got "${texts[0]}" but rank ${other} got "${texts[other]}"`;
};

function collectiveCheck(c: BadCall): ConformanceCheck {
  return {
    name: c.name,
    minSize: 2,
    async run(group) {
      await compareOutcomes(
        group,
        c.name,
        async () => {
          const message = promptRejection(`rank ${group.rank}: ${c.name}`, await settleWithin(() => c.bad(group), BAD_CALL_BOUND_MS));
          for (const word of c.mentions(group.size)) expectTrue(message.includes(word), `${c.name}: the message should mention "${word}": ${message}`);
          return message;
        },
        allSame,
      );
      await groupStillWorks(group, c.name);
    },
  };
}

/** Gathers one text per rank (collective over `group`). */
async function textsOf(group: ProcessGroup, text: string): Promise<string[]> {
  const bytes = new TextEncoder().encode(text);
  const sizes = Array.from((await group.allGather(Int32Array.from([bytes.length]))).data as Int32Array);
  const all = (await group.allGather(bytes, { sizes })).data as Uint8Array;
  let at = 0;
  return sizes.map((n) => {
    const text = new TextDecoder().decode(all.subarray(at, at + n));
    at += n;
    return text;
  });
}

/** Rank 0 sends to rank 1 with the given arguments; both must reject promptly with one message. */
function p2pCheck(name: string, send: () => [unknown, unknown], recv: () => [unknown, unknown], mentions: string[]): ConformanceCheck {
  return {
    name,
    minSize: 2,
    async run(group) {
      await compareOutcomes(
        group,
        name,
        async () => {
          if (group.rank >= 2) return "";
          const [buffer, tag] = group.rank === 0 ? send() : recv();
          const s = await settleWithin(
            () => (group.rank === 0 ? group.send(buffer as Tensor, 1, tag as number) : group.recv(buffer as Tensor, 0, tag as number)),
            BAD_CALL_BOUND_MS,
          );
          const message = promptRejection(`rank ${group.rank}: ${name} (${group.rank === 0 ? "send" : "recv"})`, s);
          for (const word of mentions) expectTrue(message.includes(word), `${name}: the message should mention "${word}": ${message}`);
          return message;
        },
        (texts) => (texts[0] === texts[1] ? null : `the sender got "${texts[0]}" but the receiver got "${texts[1]}"`),
      );
      await groupStillWorks(group, name);
    },
  };
}

const P2P_CHECKS: ConformanceCheck[] = [
  p2pCheck(
    "errors/p2p/send-tag-fractional",
    () => [new Float32Array(4), 1.5],
    () => [new Float32Array(4), 0],
    ["rank 0", "1.5"],
  ),
  p2pCheck(
    "errors/p2p/recv-tag-not-a-number",
    () => [new Float32Array(4), 0],
    () => [new Float32Array(4), "0"],
    ["rank 1", "tag"],
  ),
  p2pCheck(
    "errors/p2p/send-not-a-tensor",
    () => [[1, 2, 3, 4], 0],
    () => [new Float32Array(4), 0],
    ["rank 0", "Tensor"],
  ),
  p2pCheck(
    "errors/p2p/recv-not-a-tensor",
    () => [new Float32Array(4), 0],
    () => [null, 0],
    ["rank 1", "Tensor"],
  ),
  p2pCheck(
    "errors/p2p/size-differs",
    () => [new Float32Array(4), 0],
    () => [new Float32Array(5), 0],
    ["[4]", "[5]"],
  ),
  p2pCheck(
    "errors/p2p/dtype-differs",
    () => [new Float32Array(4), 0],
    () => [new Int32Array(4), 0],
    ["float32", "int32"],
  ),
  p2pCheck(
    "errors/p2p/tag-differs",
    () => [new Float32Array(4), 3],
    () => [new Float32Array(4), 4],
    ["3", "4"],
  ),
  {
    name: "errors/p2p/peer-not-in-group",
    minSize: 2,
    async run(group) {
      // not collective: each rank's own call rejects at once (no rank can be the other side)
      const P = group.size;
      const cases: [string, () => Promise<unknown>][] = [
        [`send to peer ${P}`, () => group.send(new Float32Array(2), P)],
        ["send to peer -1", () => group.send(new Float32Array(2), -1)],
        ["send to itself", () => group.send(new Float32Array(2), group.rank)],
        ["send to peer 0.5", () => group.send(new Float32Array(2), 0.5)],
        [`recv from peer ${P}`, () => group.recv(new Float32Array(2), P)],
        ["recv from itself", () => group.recv(new Float32Array(2), group.rank)],
        ['recv from peer "1"', () => group.recv(new Float32Array(2), "1" as unknown as number)],
      ];
      for (const [what, fn] of cases) {
        const message = promptRejection(`rank ${group.rank}: ${what}`, await settleWithin(fn, BAD_CALL_BOUND_MS));
        expectTrue(message.includes(`rank ${group.rank}`) && message.includes("peer"), `${what}: the message should name this rank and the peer: ${message}`);
      }
      await groupStillWorks(group, "errors/p2p/peer-not-in-group");
    },
  },
];

/** 1000 axes of size 1: a header of about 2 KB. */
const MANY_AXES = new Array<number>(1000).fill(1);

/** Calls that may or may not be possible on a backend (fixed-size header slots): all ranks succeed with the right data, or all reject alike. */
const LIMIT_CHECKS: ConformanceCheck[] = [
  {
    name: "errors/limits/many-axes-allReduce",
    minSize: 2,
    async run(group) {
      const t = Tensor.from("float32", MANY_AXES, [group.rank + 1]);
      await compareOutcomes(
        group,
        "many-axes allReduce",
        async () => {
          const s = await settleWithin(() => group.allReduce(t), BAD_CALL_BOUND_MS);
          if (s.error !== null || s.late) return promptRejection(`rank ${group.rank}: many-axes allReduce`, s);
          expectTrue(t.data[0] === (group.size * (group.size + 1)) / 2, `many-axes allReduce gave ${t.data[0]}`);
          return "resolved";
        },
        allSame,
      );
      await groupStillWorks(group, "many-axes allReduce");
    },
  },
  {
    name: "errors/limits/many-axes-send-recv",
    minSize: 2,
    async run(group) {
      await compareOutcomes(
        group,
        "many-axes send/recv",
        async () => {
          if (group.rank >= 2) return "";
          const t = Tensor.from("float32", MANY_AXES, [group.rank === 0 ? 42 : 0]);
          const s = await settleWithin(() => (group.rank === 0 ? group.send(t, 1, 0) : group.recv(t, 0, 0)), BAD_CALL_BOUND_MS);
          if (s.error !== null || s.late) return promptRejection(`rank ${group.rank}: many-axes ${group.rank === 0 ? "send" : "recv"}`, s);
          expectTrue(t.data[0] === 42, `many-axes recv got ${t.data[0]}`);
          return "resolved";
        },
        (texts) => (texts[0] === texts[1] ? null : `the sender got "${texts[0]}" but the receiver got "${texts[1]}"`),
      );
      await groupStillWorks(group, "many-axes send/recv");
    },
  },
];

async function useAfterDestroy(group: ProcessGroup): Promise<void> {
  const sub = await group.newGroup(ranksOf(group.size));
  expectTrue(sub !== null, "newGroup of every rank returned null");
  await sub!.destroy();
  await sub!.destroy(); // a second destroy is a no-op
  const calls: [string, () => Promise<unknown>][] = [
    ["allReduce", () => sub!.allReduce(new Float32Array(2))],
    ["barrier", () => sub!.barrier()],
    ["newGroup", () => sub!.newGroup([0])],
    ["send", () => sub!.send(new Float32Array(2), (sub!.rank + 1) % sub!.size)],
  ];
  for (const [what, fn] of calls) {
    await compareOutcomes(
      group,
      `${what} on a destroyed group`,
      async () => {
        const message = promptRejection(`rank ${group.rank}: ${what} on a destroyed group`, await settleWithin(fn, BAD_CALL_BOUND_MS));
        expectTrue(message.includes("destroyed"), `${what} on a destroyed group: ${message}`);
        return message;
      },
      allSame,
    );
  }
  await groupStillWorks(group, "use after destroy");
}

export const ERROR_CHECKS: readonly ConformanceCheck[] = [
  ...BAD_COLLECTIVE_CALLS.map(collectiveCheck),
  ...P2P_CHECKS,
  ...LIMIT_CHECKS,
  { name: "errors/destroy/use-after-destroy", minSize: 2, run: useAfterDestroy },
];
