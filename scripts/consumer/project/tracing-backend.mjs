// A user backend written in the consumer: a ProcessGroup implementation that
// delegates every operation to an inner group (the threads backend's) and
// counts the calls it forwards, sub-groups included. Registered by name at
// the top of the rank entries that use it.
import { CollectiveError, getBackend, registerBackend } from "@ulysses/collectives";

export class TracingGroup {
  constructor(inner, calls) {
    this.inner = inner;
    this.calls = calls;
    this.backend = "tracing";
  }
  get rank() {
    return this.inner.rank;
  }
  get size() {
    return this.inner.size;
  }
  get worldRanks() {
    return this.inner.worldRanks;
  }
  note(op) {
    this.calls.set(op, (this.calls.get(op) ?? 0) + 1);
  }
  allToAll(input, options) {
    this.note("allToAll");
    return this.inner.allToAll(input, options);
  }
  allGather(input, options) {
    this.note("allGather");
    return this.inner.allGather(input, options);
  }
  reduceScatter(input, options) {
    this.note("reduceScatter");
    return this.inner.reduceScatter(input, options);
  }
  allReduce(tensor, options) {
    this.note("allReduce");
    return this.inner.allReduce(tensor, options);
  }
  broadcast(tensor, options) {
    this.note("broadcast");
    return this.inner.broadcast(tensor, options);
  }
  barrier() {
    this.note("barrier");
    return this.inner.barrier();
  }
  send(tensor, peer, tag) {
    this.note("send");
    return this.inner.send(tensor, peer, tag);
  }
  recv(tensor, peer, tag) {
    this.note("recv");
    return this.inner.recv(tensor, peer, tag);
  }
  async newGroup(ranks) {
    this.note("newGroup");
    const child = await this.inner.newGroup(ranks);
    return child === null ? null : new TracingGroup(child, this.calls);
  }
  stats() {
    return this.inner.stats();
  }
  resetStats() {
    this.inner.resetStats();
  }
  destroy() {
    return this.inner.destroy();
  }
}

export const calls = new Map();

export function registerTracing() {
  registerBackend("tracing", async (options) => {
    const threads = getBackend("threads");
    if (!threads) throw new CollectiveError("tracing: no threads backend registered");
    return new TracingGroup(await threads(options), calls);
  });
}
