/**
 * Alpha-beta costs of the collectives, per device, for a group of `size`
 * devices laid out `devicesPerNode` to a node. Formulas and their sources are
 * in this package's README ("Collective costs"). Times are in seconds, sizes in
 * bytes. Nothing here knows about models.
 */
import type { HardwareProfile } from "./profile.js";

export type CollectiveKind = "allToAll" | "allGather" | "reduceScatter" | "allReduce";

export interface CollectiveCost {
  /** Seconds for one call. */
  seconds: number;
  /** Bytes this device sends in one call. */
  bytesSent: number;
}

/** The bandwidth of a ring collective: the intra-node link, or, across nodes, the node's g NICs shared by its g devices (capped by the intra-node link). */
export function ringBandwidth(spansNodes: boolean, devicesPerNode: number, intraBw: number, interBw: number): number {
  return spansNodes ? Math.min(intraBw, devicesPerNode * interBw) : intraBw;
}

/**
 * Cost of one collective where every device holds `localBytes` (the all-to-all
 * input, the all-gather input, the reduce-scatter output, the all-reduce
 * buffer).
 */
export function collectiveCost(kind: CollectiveKind, size: number, localBytes: number, profile: HardwareProfile): CollectiveCost {
  if (size <= 1) return { seconds: 0, bytesSent: 0 };
  const g = profile.devicesPerNode;
  const spansNodes = size > g;
  const intra = profile.intraNode;
  const inter = profile.interNode;
  const alpha = (spansNodes ? inter.latencyUs : intra.latencyUs) * 1e-6;
  const intraBw = intra.bandwidthGBs * 1e9;
  const interBw = inter.bandwidthGBs * 1e9;
  switch (kind) {
    case "allToAll": {
      // Each device sends (P-1)/P of its data, one chunk per peer, all sends
      // posted at once (NCCL's grouped send/recv, MPI_Alltoall's pairwise
      // exchange on large messages): one latency, then peers on the same node
      // take the fast link and the others the inter-node link, both at once.
      const sent = ((size - 1) / size) * localBytes;
      const peersOnNode = Math.min(size, g) - 1;
      const peersOffNode = size - 1 - peersOnNode;
      const chunk = localBytes / size;
      const t = Math.max((peersOnNode * chunk) / intraBw, (peersOffNode * chunk) / interBw);
      return { seconds: alpha + t, bytesSent: sent };
    }
    case "allGather":
    case "reduceScatter": {
      // Ring: P-1 steps of one chunk each. A ring that leaves the node crosses
      // each node boundary once; NCCL runs one ring per NIC, so the g GPUs of
      // a node share their g NICs' bandwidth on the boundary hops: the ring
      // runs at min(B_intra, g·B_inter).
      const sent = (size - 1) * localBytes;
      return { seconds: (size - 1) * alpha + sent / ringBandwidth(spansNodes, g, intraBw, interBw), bytesSent: sent };
    }
    case "allReduce": {
      // Ring reduce-scatter + all-gather of chunks localBytes / P.
      const sent = 2 * ((size - 1) / size) * localBytes;
      return { seconds: 2 * (size - 1) * alpha + sent / ringBandwidth(spansNodes, g, intraBw, interBw), bytesSent: sent };
    }
  }
}
