/**
 * Where a rank's compute time goes, op by op: OpProfile wraps an ops object
 * (TrainingOps, a LocalAttention) so that every method call is timed, from
 * the call until its promise settles (or its return, for a method that
 * returns no promise), and summed by name ("ops.linearForward",
 * "attention.backward"). A wrapped method runs on the object it came from,
 * so the calls an implementation makes to its own methods are part of the
 * outer call's time and are not counted again. Calls that overlap in time
 * (none on a rank's compute path today) would each count whole.
 */

/** One op's calls and their summed wall time. */
export interface OpTotals {
  calls: number;
  ms: number;
}

type Method = (...args: unknown[]) => unknown;

export class OpProfile {
  private totals = new Map<string, OpTotals>();

  /** Adds one call of `name` that took `ms`. */
  record(name: string, ms: number): void {
    const entry = this.totals.get(name);
    if (entry === undefined) this.totals.set(name, { calls: 1, ms });
    else {
      entry.calls += 1;
      entry.ms += ms;
    }
  }

  /** The totals since the last take (or since the start), by name in first-call order; starts over. */
  take(): Record<string, OpTotals> {
    const taken = Object.fromEntries(this.totals);
    this.totals = new Map();
    return taken;
  }

  /**
   * `target` with each of its methods timed under `${prefix}.${name}`; every
   * other property (and a method it lacks) reads through unchanged.
   */
  wrap<T extends object>(prefix: string, target: T): T {
    const wrapped = new Map<PropertyKey, Method>();
    return new Proxy(target, {
      get: (object, key) => {
        const value: unknown = Reflect.get(object, key, object);
        if (typeof value !== "function" || typeof key !== "string" || key === "constructor") return value;
        let timed = wrapped.get(key);
        if (timed === undefined) {
          const name = `${prefix}.${key}`;
          const method = value as Method;
          timed = (...args: unknown[]) => {
            const started = performance.now();
            const result = method.apply(object, args);
            if (result instanceof Promise) {
              const done = () => this.record(name, performance.now() - started);
              return result.then(
                (resolved) => {
                  done();
                  return resolved;
                },
                (error: unknown) => {
                  done();
                  throw error;
                },
              );
            }
            this.record(name, performance.now() - started);
            return result;
          };
          wrapped.set(key, timed);
        }
        return timed;
      },
    });
  }
}
