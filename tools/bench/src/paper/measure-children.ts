/**
 * The measurements `bench:paper` runs in child processes (each its own ONNX
 * Runtime and peak RSS, ORT_DISABLE_TELEMETRY=1): the kernel rates
 * (rates-case.ts) and the convergence runs of the trainer CLI at SP = 1, 2, 4
 * (same seed, same global batch; metrics.jsonl read back).
 */
import { execFile } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { RateCase } from "./rates-case.js";
import type { PaperFlags } from "./paper-flags.js";

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
const NODE_ARGS = ["--conditions=@ulysses/source", "--import", "tsx"];

async function runNode(script: string, args: string[], maxBuffer = 8 << 20): Promise<string> {
  const env = { ...process.env, ORT_DISABLE_TELEMETRY: "1", INIT_CWD: REPO_ROOT };
  try {
    const { stdout } = await promisify(execFile)(process.execPath, [...NODE_ARGS, script, ...args], { cwd: REPO_ROOT, env, maxBuffer });
    return stdout;
  } catch (cause) {
    const e = cause as { stderr?: string; message: string };
    throw new Error(`bench:paper: child '${path.relative(REPO_ROOT, script)} ${args.join(" ")}' failed: ${e.message}\n${e.stderr ?? ""}`, { cause });
  }
}

const lastJson = <T>(stdout: string): T => JSON.parse(stdout.trim().split("\n").at(-1)!) as T;

export interface KernelRates {
  threads: number;
  /** ONNX Runtime MatMul 2048^3, GFLOP/s (all cores, and one thread). */
  matmulGflops: number;
  matmulOneThreadGflops: number;
  /** The block's forward GEMMs at rows x hidden (one thread), GFLOP/s. */
  gemmGflops: number;
  gemmRows: number;
  /**
   * Causal attention forward+backward (OrtAttention, one thread, 2 heads of
   * the block's head size: its tiling depends on the key length, not on the
   * heads) at several N, useful GFLOP/s (12·h·pairs·d, pairs = N(N+1)/2).
   */
  attention: { seq: number; seconds: number; gflops: number }[];
  /** The rate at the longest measured N (the profile's single attentionEfficiency). */
  attentionGflops: number;
}

export async function measureKernelRates(f: PaperFlags, log: (line: string) => void): Promise<KernelRates> {
  const script = fileURLToPath(new URL("./rates-case.ts", import.meta.url));
  const threads = os.availableParallelism();
  const run = async <T>(c: RateCase) => lastJson<T>(await runNode(script, [JSON.stringify(c)]));
  const matmul = await run<{ forwardGflops: number }>({ kind: "matmul", threads, size: 2048, spin: true });
  const one = threads > 1 ? await run<{ forwardGflops: number }>({ kind: "matmul", threads: 1, size: 2048, spin: true }) : matmul;
  // Spinning as in the ranks' SessionCache (ONNX Runtime's default). Per-core rates (one thread): every rank of the block runs one thread.
  const gemm = await run<{ forwardGflops: number }>({ kind: "gemm", threads: 1, rows: f.rateRows, hidden: f.hidden, repeats: 3 });
  const attention: KernelRates["attention"] = [];
  for (const seq of f.attentionSeqs) {
    // The case warms its sessions on N = 1024 first; best of 2 up to 8192 (the first run also grows ONNX Runtime's buffers), one run beyond.
    const r = await run<{ totalGflops: number; totalSeconds: number }>({
      kind: "attention",
      threads: 1,
      implementation: "ort",
      seq,
      heads: 2,
      headDim: f.hidden / f.heads,
      causal: true,
      repeats: seq <= 8192 ? 2 : 1,
      spin: true,
    });
    attention.push({ seq, seconds: r.totalSeconds, gflops: r.totalGflops });
  }
  const rates: KernelRates = {
    threads,
    matmulGflops: matmul.forwardGflops,
    matmulOneThreadGflops: one.forwardGflops,
    gemmGflops: gemm.forwardGflops,
    gemmRows: f.rateRows,
    attentionGflops: attention.at(-1)!.gflops,
    attention,
  };
  log(
    `  MatMul 2048^3: ${rates.matmulGflops.toFixed(1)} GFLOP/s (${threads} threads), ${rates.matmulOneThreadGflops.toFixed(1)} (1 thread); one thread: block GEMMs ${rates.gemmGflops.toFixed(1)}, attention (2 heads) ${attention.map((a) => `N=${a.seq} ${a.gflops.toFixed(1)}`).join(", ")} GFLOP/s`,
  );
  return rates;
}

/**
 * The machine's matrix rate for MFU: the higher of the all-core MatMul rate and
 * threads x the one-thread rate, both measured in this run (on a shared host
 * either can be disturbed, and a low denominator would inflate MFU).
 */
export function machineMatmulGflops(rates: KernelRates): number {
  return Math.max(rates.matmulGflops, rates.threads * rates.matmulOneThreadGflops);
}

/**
 * The better of two measurements of the kernel rates, field by field (the
 * suite measures them before and after the block steps: on a shared machine a
 * rate is only ever lowered by other work, so the best is the machine's).
 */
export function bestRates(a: KernelRates, b: KernelRates): KernelRates {
  const attention = a.attention.map((x, i) => {
    const y = b.attention[i];
    return y !== undefined && y.gflops > x.gflops ? y : x;
  });
  return {
    ...a,
    matmulGflops: Math.max(a.matmulGflops, b.matmulGflops),
    matmulOneThreadGflops: Math.max(a.matmulOneThreadGflops, b.matmulOneThreadGflops),
    gemmGflops: Math.max(a.gemmGflops, b.gemmGflops),
    attention,
    attentionGflops: attention.at(-1)!.gflops,
  };
}

export interface ConvergenceRun {
  sp: number;
  losses: number[];
  tokensPerSec: number;
  wallSeconds: number;
  command: string;
}

export async function measureConvergence(f: PaperFlags, outDir: string, log: (line: string) => void): Promise<ConvergenceRun[]> {
  const cli = path.join(REPO_ROOT, "apps/trainer/src/cli.ts");
  const runs: ConvergenceRun[] = [];
  for (const sp of f.trainRanks) {
    const dir = path.join(outDir, "paper-train", `sp${sp}`);
    fs.rmSync(dir, { recursive: true, force: true });
    const args = ["--sp", String(sp), "--steps", String(f.trainSteps), "--out", dir, "--no-export", "--log-every", "100000", "--checkpoint-every", "0"];
    const started = performance.now();
    await runNode(cli, args);
    const wallSeconds = (performance.now() - started) / 1000;
    const metrics = fs
      .readFileSync(path.join(dir, "metrics.jsonl"), "utf8")
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as { loss: number; tokensPerSec: number });
    const tail = metrics.slice(1);
    const tokensPerSec = tail.length > 0 ? tail.reduce((n, m) => n + m.tokensPerSec, 0) / tail.length : metrics[0]!.tokensPerSec;
    runs.push({
      sp,
      losses: metrics.map((m) => m.loss),
      tokensPerSec,
      wallSeconds,
      command: `pnpm train ${args.join(" ").replace(dir, path.relative(REPO_ROOT, dir))}`,
    });
    log(`  SP=${sp}: ${metrics.length} steps, loss ${metrics[0]!.loss.toFixed(4)} -> ${metrics.at(-1)!.loss.toFixed(4)}, ${wallSeconds.toFixed(0)} s`);
  }
  return runs;
}

/** The largest |a - b| / |a| over the steps both runs have. */
export function maxRelativeDifference(reference: readonly number[], other: readonly number[]): number {
  let worst = 0;
  for (let i = 0; i < Math.min(reference.length, other.length); i++) worst = Math.max(worst, Math.abs(other[i]! - reference[i]!) / Math.abs(reference[i]!));
  return worst;
}

/** Runs the projection CLI (A100 profile, 32 and 64 devices) and lists the files it wrote. */
export async function runClusterProjection(outDir: string): Promise<{ dir: string; files: string[] }> {
  const dir = path.join(outDir, "project");
  await runNode(path.join(REPO_ROOT, "tools/project/src/cli.ts"), ["--out", dir, "--devices", "32,64"]);
  return { dir, files: fs.readdirSync(dir).sort() };
}
