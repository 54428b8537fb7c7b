import { execFile } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

// Runs in a child process so its peak RSS (getrusage maxRSS) belongs to this
// measurement alone; the baseline is taken after the inputs exist. The child
// runs with glibc's mmap threshold fixed at 128 KiB, as the trainer runs
// (MMAP_THRESHOLD_BYTES in @ulysses/trainer), so the peak counts the kernel's
// live buffers: under glibc's dynamic threshold freed blocks stay in the heap
// and the same work measured 0.51 GiB alone and 1.15 GiB beside other tests.
const PROBE = `
import { Tensor } from "@ulysses/tensors";
import { OrtAttention, SessionCache } from "@ulysses/kernels";
const [seq, heads, d] = [16384, 4, 64];
const make = (seed) => {
  const x = new Tensor("float32", [1, seq, heads, d]);
  let s = seed;
  for (let i = 0; i < x.size; i++) { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; x.data[i] = s / 2 ** 32 - 0.5; }
  return x;
};
const q = make(1), k = make(2), v = make(3), dOut = make(4);
globalThis.gc();
const baseline = process.memoryUsage().rss;
const attention = new OrtAttention({ cache: new SessionCache({ intraOpThreads: 1 }) });
const f = await attention.forward(q, k, v, { causal: true });
const g = await attention.backward(q, k, v, f.out, dOut, f.logSumExp, { causal: true });
const finite = [f.out, g.dq, g.dk, g.dv].every((t) => t.data.every(Number.isFinite));
console.log(JSON.stringify({ baseline, peak: process.resourceUsage().maxRSS * 1024, finite }));
`;

const GiB = 1024 ** 3;

describe("OrtAttention memory", () => {
  it("causal forward + backward at seq 16384, 4 heads of 64 adds less than 1 GiB RSS", async () => {
    const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--conditions=@ulysses/source", "--import", "tsx", "--expose-gc", "--input-type=module", "-e", PROBE],
      { cwd: packageRoot, env: { ...process.env, ORT_DISABLE_TELEMETRY: "1", MALLOC_MMAP_THRESHOLD_: String(128 * 1024) }, maxBuffer: 1 << 20 },
    );
    const result = JSON.parse(stdout.trim().split("\n").at(-1)!) as { baseline: number; peak: number; finite: boolean };
    const added = result.peak - result.baseline;
    expect(result.finite).toBe(true);
    // The four outputs alone are 64 MiB: a smaller delta means the measurement is broken.
    expect(added).toBeGreaterThan(64 * 1024 ** 2);
    expect(added, `added ${(added / GiB).toFixed(3)} GiB`).toBeLessThan(GiB);
  }, 300_000);
});
