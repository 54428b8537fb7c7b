/**
 * Exact communication accounting shared by every backend (local, threads,
 * mpi, user backends). A backend computes the traffic of an operation with
 * `trafficOf` from the validated plan and records it with `StatsRecorder`, so
 * all backends count bytes the same way and tests can check them exactly.
 *
 * Definitions (P ranks, rank r, B = bytes per element, "row" = one slice of
 * axis 0, a rank's share to itself is never counted):
 * - allToAll: sent = sum over j != r of rows r sends to j * rowBytes;
 *   received = sum over j != r of rows r receives from j * rowBytes.
 * - allGather (direct: every peer reads a rank's contribution once):
 *   sent = own bytes * (P - 1); received = sum of the other ranks' bytes.
 * - reduceScatter (direct: rank j reduces chunk j reading it from every
 *   rank): sent = input bytes - bytes of chunk r; received = chunk r bytes * (P - 1).
 * - allReduce (reduce-scatter then all-gather over element chunks c_0..c_{P-1}
 *   = evenSplitSizes(numel, P)): sent = received = (numel - c_r) * B + c_r * B * (P - 1).
 * - broadcast (direct): root sends bytes * (P - 1) and receives 0; every
 *   other rank receives bytes and sends 0.
 * - send / recv: the tensor's bytes (sent by the sender, received by the receiver).
 * - barrier: 0 bytes.
 * `elements` counts the elements of the caller's input tensor (the tensor
 * itself for allReduce, broadcast, send and recv; 0 for barrier).
 * `timeMs` is wall time from the call to its completion (queueing included).
 */
import { evenSplitSizes } from "@ulysses/tensors";
import { OP_KINDS, type CommStats, type OpKind, type OpStats } from "./types.js";
import type { Plan } from "./plan.js";

export interface Traffic {
  bytesSent: number;
  bytesReceived: number;
}

function emptyOpStats(): OpStats {
  return { calls: 0, bytesSent: 0, bytesReceived: 0, elements: 0, timeMs: 0 };
}

/** Bytes rank `rank` sends and receives for a validated collective plan. */
export function trafficOf(plan: Plan, rank: number): Traffic {
  const size = plan.size;
  switch (plan.op) {
    case "allToAll": {
      let bytesSent = 0;
      let bytesReceived = 0;
      for (let j = 0; j < size; j++) {
        if (j === rank) continue;
        bytesSent += plan.sendRows[rank]![j]! * plan.rowBytes;
        bytesReceived += plan.sendRows[j]![rank]! * plan.rowBytes;
      }
      return { bytesSent, bytesReceived };
    }
    case "allGather": {
      const own = plan.rows[rank]! * plan.rowBytes;
      const total = plan.rows.reduce((a, b) => a + b, 0) * plan.rowBytes;
      return { bytesSent: own * (size - 1), bytesReceived: total - own };
    }
    case "reduceScatter": {
      const total = plan.rows.reduce((a, b) => a + b, 0) * plan.rowBytes;
      const mine = plan.rows[rank]! * plan.rowBytes;
      return { bytesSent: total - mine, bytesReceived: mine * (size - 1) };
    }
    case "allReduce": {
      const chunks = evenSplitSizes(plan.numel, size);
      const mine = chunks[rank]! * plan.elementBytes;
      const bytes = plan.numel * plan.elementBytes - mine + mine * (size - 1);
      return { bytesSent: bytes, bytesReceived: bytes };
    }
    case "broadcast": {
      const bytes = plan.numel * plan.elementBytes;
      return rank === plan.root ? { bytesSent: bytes * (size - 1), bytesReceived: 0 } : { bytesSent: 0, bytesReceived: bytes };
    }
    case "barrier":
    case "newGroup":
      return { bytesSent: 0, bytesReceived: 0 };
  }
}

/** Per-op counters of one group on one rank. */
export class StatsRecorder {
  private byOp: Record<OpKind, OpStats>;

  constructor() {
    this.byOp = StatsRecorder.empty();
  }

  private static empty(): Record<OpKind, OpStats> {
    const byOp = {} as Record<OpKind, OpStats>;
    for (const kind of OP_KINDS) byOp[kind] = emptyOpStats();
    return byOp;
  }

  record(kind: OpKind, traffic: Traffic, elements: number, timeMs: number): void {
    const s = this.byOp[kind];
    s.calls += 1;
    s.bytesSent += traffic.bytesSent;
    s.bytesReceived += traffic.bytesReceived;
    s.elements += elements;
    s.timeMs += timeMs;
  }

  /** A snapshot: totals per op kind plus the overall total. */
  stats(): CommStats {
    const byOp = {} as Record<OpKind, OpStats>;
    const total = emptyOpStats();
    for (const kind of OP_KINDS) {
      const s = { ...this.byOp[kind] };
      byOp[kind] = s;
      total.calls += s.calls;
      total.bytesSent += s.bytesSent;
      total.bytesReceived += s.bytesReceived;
      total.elements += s.elements;
      total.timeMs += s.timeMs;
    }
    return { byOp, total };
  }

  reset(): void {
    this.byOp = StatsRecorder.empty();
  }
}
