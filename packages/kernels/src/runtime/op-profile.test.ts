import { describe, expect, it } from "vitest";
import { OpProfile } from "./op-profile.js";

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** An ops object whose outer method calls its own inner one, as implementations do. */
class FakeOps {
  readonly label = "fake";
  innerCalls = 0;

  async outer(ms: number): Promise<string> {
    await this.inner(ms);
    return this.label;
  }

  async inner(ms: number): Promise<void> {
    this.innerCalls += 1;
    await sleep(ms);
  }

  release(n: number): number {
    return n + 1;
  }

  async fail(): Promise<void> {
    await sleep(5);
    throw new Error("boom");
  }
}

describe("OpProfile", () => {
  it("times each call from call to settlement, counts calls, and does not count an implementation's calls to its own methods again", async () => {
    const profile = new OpProfile();
    const ops = profile.wrap("ops", new FakeOps());
    expect(await ops.outer(30)).toBe("fake");
    expect(await ops.outer(10)).toBe("fake");
    await ops.inner(20);
    const totals = profile.take();
    expect(Object.keys(totals)).toEqual(["ops.outer", "ops.inner"]);
    expect(totals["ops.outer"]!.calls).toBe(2);
    expect(totals["ops.outer"]!.ms).toBeGreaterThanOrEqual(39);
    expect(totals["ops.inner"]!.calls).toBe(1);
    expect(totals["ops.inner"]!.ms).toBeGreaterThanOrEqual(19);
    expect(totals["ops.inner"]!.ms).toBeLessThan(totals["ops.outer"]!.ms + 1000);
    // the target ran every call: three inner calls, one of them counted
    expect(ops.innerCalls).toBe(3);
  });

  it("passes results, properties and errors through; times methods that return no promise; starts over after take", async () => {
    const profile = new OpProfile();
    const ops = profile.wrap("attention", new FakeOps());
    expect(ops.label).toBe("fake");
    expect(ops.release(41)).toBe(42);
    await expect(ops.fail()).rejects.toThrow("boom");
    // a method the object lacks stays missing (optional ops are tested with ?.)
    expect((ops as unknown as { missing?: () => void }).missing).toBeUndefined();
    const first = profile.take();
    expect(first["attention.release"]).toEqual({ calls: 1, ms: expect.any(Number) });
    expect(first["attention.fail"]!.calls).toBe(1);
    expect(first["attention.fail"]!.ms).toBeGreaterThanOrEqual(4);
    expect(profile.take()).toEqual({});
    // the same wrapped function each read, so identity checks hold
    expect(ops.outer).toBe(ops.outer);
  });
});
