/**
 * The header exchange that precedes every collective: each rank's OpHeader
 * (what it is asking for) goes to every rank with one MPI_Allgather of a
 * fixed-size slot, so a mismatch (other op, dtype, shape, splits) is found by
 * `planOp` on every rank and rejected there with the same text instead of
 * crashing or hanging inside MPI. A header too long for the slot is sent
 * again, whole, with MPI_Allgatherv (every rank learns that from the slots).
 */
import type { OpHeader } from "@ulysses/collectives/backend";
import { displacements, type Channel } from "./channel.js";
import { MpiError } from "./errors.js";

/** Slot bytes: a 4-byte length, then as much UTF-8 JSON as fits. */
const SLOT = 1024;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export class HeaderExchange {
  private readonly mine = new Uint8Array(SLOT);
  private readonly all: Uint8Array;

  constructor(private readonly channel: Channel) {
    this.all = new Uint8Array(SLOT * channel.size);
  }

  /** Every rank's header, indexed by group rank. */
  async exchange(header: OpHeader): Promise<OpHeader[]> {
    const { channel, mine, all } = this;
    const bytes = encoder.encode(JSON.stringify(header));
    new DataView(mine.buffer).setUint32(0, bytes.length, true);
    mine.set(bytes.subarray(0, SLOT - 4), 4);
    const what = `${header.op} (header exchange)`;
    await channel.run(what, () => channel.native.allgather(channel.lane, channel.comm, mine, all));
    const view = new DataView(all.buffer);
    const lengths = Array.from({ length: channel.size }, (_, r) => view.getUint32(r * SLOT, true));
    if (lengths.every((n) => n <= SLOT - 4)) {
      return lengths.map((n, r) => this.decode(all.subarray(r * SLOT + 4, r * SLOT + 4 + n), r));
    }
    const whole = new Uint8Array(lengths.reduce((a, b) => a + b, 0));
    const displs = displacements(lengths);
    await channel.run(what, () => channel.native.allgatherv(channel.lane, channel.comm, bytes, whole, lengths, displs));
    return lengths.map((n, r) => this.decode(whole.subarray(displs[r]!, displs[r]! + n), r));
  }

  private decode(bytes: Uint8Array, rank: number): OpHeader {
    try {
      return JSON.parse(decoder.decode(bytes)) as OpHeader;
    } catch (cause) {
      throw new MpiError(`rank ${rank} sent an unreadable operation header (${bytes.length} bytes); are all ranks running the same program?`, { cause });
    }
  }
}
