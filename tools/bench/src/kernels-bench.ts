/**
 * `pnpm bench:kernels`: attention kernel speed and memory against ONNX
 * Runtime's own MatMul rate, measured in one run. Each case runs in a child
 * process (kernels-bench-case.ts) so its peak RSS is its own. Prints a table
 * and writes bench-results/kernels.json. Never part of `test`.
 *
 *   pnpm bench:kernels [--quick] [--threads N] [--impl ort|fused|reference] [--spin]
 *
 * --spin keeps ONNX Runtime's spinning intra-op threads (its default); without
 * it sessions block when idle, which the shared, oversubscribed development
 * machine needs for meaningful multi-thread numbers (both MatMul and attention
 * run with the same setting).
 * --quick: seq 1024 and 4096 only, fewer repeats; --impl reference runs seq
 * 1024 once (plain TypeScript is slow). Default threads: 1 and all cores. Rates are "useful" GFLOP/s: forward 4·h·pairs·d, forward+backward
 * 12·h·pairs·d (backward 8; the recomputed QK^T is not counted), pairs =
 * attended (query, key) pairs; batch 1.
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { AttentionImplementation } from "@ulysses/kernels";
import { runCase, type AttentionCase, type BenchCase, type CaseResult } from "./kernels-bench-case.js";
import { parseFlags, positiveInteger, readCommandLine, UsageError } from "./cli-flags.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const SCRIPT = fileURLToPath(import.meta.url);
const REPO_ROOT = path.resolve(path.dirname(SCRIPT), "../../..");
const IMPLEMENTATIONS = ["ort", "fused", "reference"] as const;

interface Args {
  quick: boolean;
  spin: boolean;
  threads: number[];
  implementation: AttentionImplementation;
  caseJson?: string;
}

const KERNELS_HELP = `Usage: pnpm bench:kernels [flags]

Attention kernel speed and memory against ONNX Runtime's own MatMul rate, each
case in its own child process; writes bench-results/kernels.json.

  --quick          seq 1024 and 4096 only, fewer repeats
  --threads N      one thread count (default: 1 and all cores)
  --impl NAME      ${IMPLEMENTATIONS.join(" | ")} (default ort)
  --spin           keep ONNX Runtime's spinning intra-op threads (its default; off here)
  --help, -h       this text
`;

const FLAGS = {
  quick: { type: "boolean" },
  spin: { type: "boolean" },
  threads: { type: "string" },
  impl: { type: "string" },
  /** One case as JSON: how the orchestrator starts each child. */
  case: { type: "string" },
} as const;

function parseKernelArgs(argv: readonly string[]): Args | null {
  const values = parseFlags("bench:kernels", argv, FLAGS);
  if (values === null) return null;
  const implementation = values.impl ?? "ort";
  if (!(IMPLEMENTATIONS as readonly string[]).includes(implementation))
    throw new UsageError(`bench:kernels: --impl must be one of ${IMPLEMENTATIONS.join(", ")}, got '${implementation}'`);
  return {
    quick: values.quick === true,
    spin: values.spin === true,
    threads: values.threads === undefined ? [...new Set([1, os.availableParallelism()])] : [positiveInteger("--threads", values.threads)],
    implementation: implementation as AttentionImplementation,
    ...(values.case === undefined ? {} : { caseJson: values.case }),
  };
}

/** The attention cases of one thread count. */
function attentionCases(args: Args, threads: number): AttentionCase[] {
  const seqs = args.implementation === "reference" ? [1024] : args.quick ? [1024, 4096] : [1024, 4096, 16384];
  const cases: AttentionCase[] = [];
  for (const seq of seqs) {
    for (const causal of [false, true]) {
      // 16384 runs 2 heads (not 8) to keep one bench run within minutes on 2 cores.
      const heads = seq >= 16384 ? 2 : 8;
      const repeats = args.implementation === "reference" ? 1 : seq <= 1024 ? (args.quick ? 3 : 5) : seq <= 4096 && !args.quick ? 3 : 1;
      cases.push({ kind: "attention", threads, implementation: args.implementation, spin: args.spin, seq, heads, headDim: 64, causal, repeats });
    }
  }
  return cases;
}

async function runChild(c: BenchCase): Promise<CaseResult & { cpuSeconds: number }> {
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [...process.execArgv, "--expose-gc", SCRIPT, "--case", JSON.stringify(c)], {
      env: { ...process.env, ORT_DISABLE_TELEMETRY: "1" },
      maxBuffer: 1 << 20,
    });
    return JSON.parse(stdout.trim().split("\n").at(-1)!) as CaseResult & { cpuSeconds: number };
  } catch (cause) {
    const stderr = String((cause as { stderr?: string }).stderr ?? "")
      .trim()
      .split("\n")
      .slice(-6)
      .join("\n");
    throw new Error(`bench case ${JSON.stringify(c)} failed:\n${stderr || (cause as Error).message}`, { cause });
  }
}

const MiB = 1024 ** 2;

function row(cells: (string | number)[], widths: number[]): string {
  return cells.map((c, i) => String(c).padStart(widths[i]!)).join("  ");
}

async function main(): Promise<void> {
  const args = readCommandLine(KERNELS_HELP, process.argv.slice(2), parseKernelArgs);
  if (args.caseJson !== undefined) {
    try {
      return await runCase(JSON.parse(args.caseJson) as BenchCase);
    } catch (error) {
      // One readable line for the orchestrator (it shows the child's last stderr lines).
      console.error(error instanceof Error ? `${error.name}: ${error.message}` : error);
      process.exit(1);
    }
  }
  const loadBefore = os.loadavg();
  const started = new Date().toISOString();
  console.error(
    `kernels bench: impl ${args.implementation}, threads ${args.threads.join(", ")}, spinning ${args.spin ? "on" : "off"}${args.quick ? ", quick" : ""}; load ${loadBefore.map((l) => l.toFixed(2)).join(" ")}`,
  );
  const matmul: Record<number, CaseResult> = {};
  const matmulRuns: Record<number, number[]> = {};
  const results: (AttentionCase & CaseResult & { matmulPercentForward: number; matmulPercentTotal: number; error?: string })[] = [];
  for (const threads of args.threads) {
    // MatMul before and after this thread count's cases; the faster one is the reference
    // (load on a shared machine drifts; the larger rate gives conservative percentages).
    const before = await runChild({ kind: "matmul", threads, spin: args.spin, size: 2048 });
    console.error(`  MatMul 2048^3, ${threads} thread(s): ${before.forwardGflops.toFixed(1)} GFLOP/s`);
    const rows: (AttentionCase & CaseResult)[] = [];
    for (const c of attentionCases(args, threads)) {
      const r = await runChild(c);
      rows.push({ ...c, ...r });
      console.error(
        `  seq ${c.seq} ${c.causal ? "causal" : "non-causal"}, ${threads} thread(s): fwd ${r.forwardGflops.toFixed(1)}, fwd+bwd ${r.totalGflops!.toFixed(1)} GFLOP/s`,
      );
    }
    const after = await runChild({ kind: "matmul", threads, spin: args.spin, size: 2048 });
    console.error(`  MatMul 2048^3, ${threads} thread(s), again: ${after.forwardGflops.toFixed(1)} GFLOP/s`);
    matmul[threads] = after.forwardGflops > before.forwardGflops ? after : before;
    matmulRuns[threads] = [before.forwardGflops, after.forwardGflops];
    const rate = matmul[threads]!.forwardGflops;
    for (const r of rows) results.push({ ...r, matmulPercentForward: (100 * r.forwardGflops) / rate, matmulPercentTotal: (100 * r.totalGflops!) / rate });
  }
  const loadAfter = os.loadavg();

  const widths = [7, 6, 5, 10, 9, 6, 9, 6, 9, 9, 9, 9];
  console.log(
    `\nAttention (${args.implementation}), batch 1, headDim 64. Useful GFLOP/s: fwd 4·h·pairs·d, fwd+bwd 12·h·pairs·d (bwd 8, recompute not counted).`,
  );
  console.log(
    `Intra-op thread spinning ${args.spin ? "on (ONNX Runtime default)" : "off (--spin turns it on)"}. % = of ONNX Runtime MatMul 2048^3 at the same thread count ` +
      `(the faster of a run before and after that thread count's cases): ${args.threads.map((t) => `${t} thread(s) ${matmul[t]!.forwardGflops.toFixed(1)} GFLOP/s (runs ${matmulRuns[t]!.map((g) => g.toFixed(1)).join(", ")})`).join("; ")}.`,
  );
  console.log(row(["threads", "seq", "heads", "mask", "fwd GF/s", "fwd %", "f+b GF/s", "f+b %", "fwd s", "f+b s", "peak MiB", "added MiB"], widths));
  for (const r of results) {
    console.log(
      row(
        [
          r.threads,
          r.seq,
          r.heads,
          r.causal ? "causal" : "none",
          r.forwardGflops.toFixed(1),
          r.matmulPercentForward.toFixed(0),
          r.totalGflops!.toFixed(1),
          r.matmulPercentTotal.toFixed(0),
          r.forwardSeconds.toFixed(3),
          r.totalSeconds!.toFixed(3),
          (r.peakRss / MiB).toFixed(0),
          (r.addedRss / MiB).toFixed(0),
        ],
        widths,
      ),
    );
  }
  console.log(
    `load average (1/5/15 min): before ${loadBefore.map((l) => l.toFixed(2)).join(" ")}, after ${loadAfter.map((l) => l.toFixed(2)).join(" ")}; ${os.availableParallelism()} cores`,
  );

  const file = path.join(REPO_ROOT, "bench-results", "kernels.json");
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const report = {
    started,
    implementation: args.implementation,
    quick: args.quick,
    spin: args.spin,
    cores: os.availableParallelism(),
    cpu: os.cpus()[0]?.model,
    loadBefore,
    loadAfter,
    flopConvention: "useful FLOPs: forward 4*b*h*pairs*d, backward 8*b*h*pairs*d (recomputed QK^T not counted); pairs = attended (query, key) pairs",
    matmul: Object.fromEntries(
      Object.entries(matmul).map(([t, r]) => [t, { size: 2048, gflops: r.forwardGflops, seconds: r.forwardSeconds, runs: matmulRuns[Number(t)] }]),
    ),
    cases: results,
  };
  fs.writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), file)}`);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
