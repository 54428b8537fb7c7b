/**
 * The shared-memory layout of the threads backend, created once per world and
 * once per group, then reused by every call:
 *
 * - World control (one per world, also held by the main thread): an abort
 *   word, the failed world rank, the failure text, and one wake word per world
 *   rank that every waiter of that rank sleeps on (any arrival in any group
 *   bumps it, so one futex serves all groups and the abort wakes everything).
 * - Group control (one per group): one arrival counter per rank, two parities
 *   of per-rank header slots (JSON `OpHeader`), and per ordered pair of ranks a
 *   point-to-point mailbox (send sequence, ack sequence, status, text).
 * - Outboxes: per rank, two growable SharedArrayBuffers (call parity 0/1) for
 *   collective data and one for point-to-point data. Only the owner writes its
 *   outboxes; peers read them. Growing keeps the address, so peers never need
 *   a new handle.
 *
 * The protocol that uses this layout lives in `threads-group.ts`.
 */
import { CollectiveError } from "../errors.js";

/** Bytes of text kept for the failure reason and for a mailbox. */
const WORLD_TEXT_BYTES = 4096;
const MAILBOX_TEXT_BYTES = 1024;
const INITIAL_OUTBOX_BYTES = 1 << 16;
export const DEFAULT_MAX_MESSAGE_BYTES = 1 << 30;

export interface GroupResources {
  /** Deterministic name: "world", then parent key + "/" + call number. */
  key: string;
  worldRanks: number[];
  control: SharedArrayBuffer;
  /** outboxes[rank][parity] */
  outboxes: SharedArrayBuffer[][];
  p2pOutboxes: SharedArrayBuffer[];
}

export interface WorldResources {
  worldSize: number;
  control: SharedArrayBuffer;
  group: GroupResources;
  maxMessageBytes: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Writes `text` as [int32 length][utf8] at `byteOffset` of `sab`; false when it does not fit. */
export function writeText(sab: SharedArrayBuffer, byteOffset: number, capacity: number, text: string): boolean {
  const bytes = encoder.encode(text);
  if (bytes.length + 4 > capacity) return false;
  new Uint8Array(sab, byteOffset + 4, bytes.length).set(bytes);
  new Int32Array(sab, byteOffset, 1)[0] = bytes.length;
  return true;
}

export function readText(sab: SharedArrayBuffer, byteOffset: number): string {
  const length = new Int32Array(sab, byteOffset, 1)[0]!;
  return decoder.decode(new Uint8Array(sab, byteOffset + 4, length).slice());
}

/** ES2024 growable SharedArrayBuffer (Node 20 has it; the repo's lib is ES2022). */
interface Growable {
  readonly byteLength: number;
  readonly maxByteLength: number;
  grow(bytes: number): void;
}
const GrowableSAB = SharedArrayBuffer as unknown as new (bytes: number, options: { maxByteLength: number }) => SharedArrayBuffer;

function growable(bytes: number, max: number): SharedArrayBuffer {
  return new GrowableSAB(Math.min(bytes, max), { maxByteLength: max });
}

/** World control words. */
export const ABORT = 0; // 0 running, 1 writing the reason, 2 aborted
const FAILED_RANK = 1;
const WAKE = 4;

/** Bytes of the world control buffer before the failure text: the words, then one 8-byte heartbeat per rank. */
function worldHeadBytes(worldSize: number): number {
  return align((WAKE + worldSize) * 4, 8) + 8 * worldSize;
}

/** The world's abort flag, wake words and heartbeats. */
export class WorldControl {
  readonly words: Int32Array;
  /** Per world rank, Date.now() when its thread last ran a heartbeat timer (0: never). */
  private readonly beats: BigInt64Array;
  private readonly textOffset: number;

  constructor(
    readonly sab: SharedArrayBuffer,
    readonly worldSize: number,
  ) {
    this.words = new Int32Array(sab, 0, WAKE + worldSize);
    this.beats = new BigInt64Array(sab, align((WAKE + worldSize) * 4, 8), worldSize);
    this.textOffset = worldHeadBytes(worldSize);
  }

  static create(worldSize: number): WorldControl {
    return new WorldControl(new SharedArrayBuffer(worldHeadBytes(worldSize) + WORLD_TEXT_BYTES), worldSize);
  }

  /** Records that `worldRank`'s thread is running its event loop now (called from a timer in that thread). */
  beat(worldRank: number): void {
    Atomics.store(this.beats, worldRank, BigInt(Date.now()));
  }

  /**
   * The rank among `candidates` whose thread has not run its event loop for
   * the longest time, at least `staleMs` (a rank in a busy loop or a long
   * synchronous call: it cannot take part in any collective), with that time
   * in ms; null when every candidate beat within `staleMs` or never beat
   * (heartbeats are the threads backend's; other backends have none).
   */
  stalest(candidates: readonly number[], staleMs: number): { rank: number; silentMs: number } | null {
    const now = Date.now();
    let found: { rank: number; silentMs: number } | null = null;
    for (const rank of candidates) {
      const last = Number(Atomics.load(this.beats, rank));
      if (last === 0) continue;
      const silentMs = now - last;
      if (silentMs >= staleMs && (found === null || silentMs > found.silentMs)) found = { rank, silentMs };
    }
    return found;
  }

  get aborted(): boolean {
    return Atomics.load(this.words, ABORT) !== 0;
  }

  /** Marks the world failed (first caller wins) and wakes every waiter. */
  abort(failedRank: number, reason: string): void {
    if (Atomics.compareExchange(this.words, ABORT, 0, 1) === 0) {
      const text = reason.length > 1000 ? `${reason.slice(0, 1000)}...` : reason;
      writeText(this.sab, this.textOffset, WORLD_TEXT_BYTES, text);
      Atomics.store(this.words, FAILED_RANK, failedRank);
      Atomics.store(this.words, ABORT, 2);
    }
    for (let r = 0; r < this.worldSize; r++) this.wake(r);
  }

  /** The failed world rank and the reason, once aborted. */
  failure(): { rank: number; reason: string } | null {
    let state = Atomics.load(this.words, ABORT);
    if (state === 0) return null;
    for (let spins = 0; state === 1 && spins < 1_000_000; spins++) state = Atomics.load(this.words, ABORT);
    if (state === 1) return { rank: -1, reason: "unknown failure" };
    return { rank: Atomics.load(this.words, FAILED_RANK), reason: readText(this.sab, this.textOffset) };
  }

  wakeWordIndex(worldRank: number): number {
    return WAKE + worldRank;
  }

  wake(worldRank: number): void {
    Atomics.add(this.words, WAKE + worldRank, 1);
    Atomics.notify(this.words, WAKE + worldRank);
  }
}

/** Offsets inside a group's control buffer. */
export class GroupLayout {
  readonly slotBytes: number;
  readonly headerOffset: number;
  readonly mailboxOffset: number;
  readonly mailboxBytes = 16 + MAILBOX_TEXT_BYTES;
  readonly totalBytes: number;

  constructor(readonly size: number) {
    this.slotBytes = 1024 + 64 * size;
    this.headerOffset = align(size * 4, 8);
    this.mailboxOffset = this.headerOffset + 2 * size * this.slotBytes;
    this.totalBytes = this.mailboxOffset + size * size * this.mailboxBytes;
  }

  /** Byte offset of rank `rank`'s header slot for call parity `parity`. */
  slot(parity: number, rank: number): number {
    return this.headerOffset + (parity * this.size + rank) * this.slotBytes;
  }

  /** Byte offset of the mailbox from `src` to `dst`: int32 [sendSeq, ackSeq, status, _], then text. */
  mailbox(src: number, dst: number): number {
    return this.mailboxOffset + (src * this.size + dst) * this.mailboxBytes;
  }
}

function align(n: number, to: number): number {
  return Math.ceil(n / to) * to;
}

export function createGroupResources(key: string, worldRanks: readonly number[], maxMessageBytes: number): GroupResources {
  const layout = new GroupLayout(worldRanks.length);
  return {
    key,
    worldRanks: [...worldRanks],
    control: new SharedArrayBuffer(layout.totalBytes),
    outboxes: worldRanks.map(() => [growable(INITIAL_OUTBOX_BYTES, maxMessageBytes), growable(INITIAL_OUTBOX_BYTES, maxMessageBytes)]),
    p2pOutboxes: worldRanks.map(() => growable(INITIAL_OUTBOX_BYTES, maxMessageBytes)),
  };
}

/** Grows an owned outbox to hold `bytes` (rounded up to 1 MiB steps). */
export function ensureCapacity(buffer: SharedArrayBuffer, bytes: number): void {
  const sab = buffer as unknown as Growable;
  if (sab.byteLength >= bytes) return;
  if (bytes > sab.maxByteLength) {
    throw new CollectiveError(
      `a message of ${bytes} bytes exceeds the threads backend's maxMessageBytes ${sab.maxByteLength}; pass a larger maxMessageBytes to launch`,
    );
  }
  sab.grow(Math.min(sab.maxByteLength, align(bytes, 1 << 20)));
}
