/**
 * `pnpm bench:memory` (issue 16): peak resident memory and speed of the
 * trainer CLI, each row in its own process (its own ONNX Runtime and peak
 * RSS), on the issue's model (2 layers, hidden 256, 8 heads, batch 1, fp32,
 * byte-level text written from this repository's Markdown), measured in one
 * run:
 *
 *   - memory rows: SP 1 (2 ONNX Runtime threads, local backend) and SP 2
 *     (threads backend, 1 thread per rank), plain (every tiling off, for
 *     reference), default (the trainer's defaults: MLP and loss tiled where a
 *     rank's untiled buffer would pass 4 MiB) and lean (default + activation
 *     checkpointing + attention in head groups, `--tile-attention auto`), at
 *     N = 8K and 16K, each run --repeat times (its peak: the median); the
 *     slope of peak RSS per token between them;
 *   - vocabulary rows: the recall task at vocab 256 and 32768, SP 2, default
 *     (the loss tiled), at 8K and 32K (repeated too): the slope with tiled loss
 *     must not grow with the vocabulary. Default rather than lean, and 8K to
 *     32K rather than to 16K, so the peaks differ by hundreds of MiB: a lean
 *     slope of a few KiB per token over 8K tokens is about 30 MiB, which the
 *     10-40 MiB spread of identical runs swamps;
 *   - speed rows: SP 1 and SP 2, default, at 4K, 8K and 16K, each run
 *     --speed-repeat times, SP 1's and SP 2's runs alternated so that each
 *     pair ran next to each other in time: tokens/s (median over the runs of
 *     each run's median over the steps after --speed-warmup untimed ones) and
 *     MFU against the same process's ONNX Runtime MatMul rate, and SP 1 as a
 *     fraction of SP 2 (the median over the pairs of their ratio);
 *   - with --long: one step at N = 131072, SP 2, lean.
 *
 * Every row is also predicted by the trainer's memory account
 * (`estimateMemory`, the preflight's estimate), printed term by term next to
 * the measured peak. Writes bench-results/memory/memory.json and memory.md;
 * the issue's targets are printed as PASS/FAIL lines and do not change the
 * exit status. `--help` lists the flags; a bad flag or value exits 2.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { median } from "@ulysses/measure";
import { readCommandLine } from "./cli-flags.js";
import { describeMachine, machineInfo } from "./paper/machine-info.js";
import { HELP, MODEL_STATE_TABLE, readFlags } from "./memory-flags.js";
import { KiB, MODES, MiB, REPO_ROOT, pairRatios, runRow, runSpeedPair, writeText, type RowResult, type RowSpec } from "./memory-rows.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const gib = (b: number) => `${(b / 2 ** 30).toFixed(2)} GiB`;
/** FLOP/s rates as GFLOP/s, comma-separated. */
const gflops = (rates: readonly number[]) => rates.map((r) => (r / 1e9).toFixed(0)).join(", ");
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
const kibPerToken = (b: number) => `${(b / KiB).toFixed(1)} KiB`;

function slope(rows: RowResult[], a: number, b: number, pick: (r: RowResult) => boolean): number | null {
  const ra = rows.find((r) => pick(r) && r.seq === a);
  const rb = rows.find((r) => pick(r) && r.seq === b);
  return ra && rb ? (rb.peakBytes - ra.peakBytes) / (b - a) : null;
}

async function main(): Promise<void> {
  const f = readCommandLine(HELP, process.argv.slice(2), readFlags);
  if (f.models) {
    // bench:models measures them (its own rows and files); this process waits for it and exits with its status
    const models = path.join(path.dirname(fileURLToPath(import.meta.url)), "models-bench.ts");
    const child = spawnSync(process.execPath, [...process.execArgv, models, ...MODEL_STATE_TABLE], { stdio: "inherit", env: process.env });
    process.exitCode = child.status ?? 1;
    return;
  }
  const outRoot = path.join(REPO_ROOT, "bench-results", "memory");
  fs.rmSync(path.join(outRoot, "runs"), { recursive: true, force: true });
  fs.mkdirSync(outRoot, { recursive: true });
  const dataFile = path.join(os.tmpdir(), `ulysses-bench-memory-${process.pid}.txt`);
  writeText(dataFile);
  const machine = machineInfo();
  const [n1, n2] = f.memorySeq;
  const [v1, v2] = f.vocabSeq;
  // a speed pair: SP 1 and SP 2 at one N, their runs alternated
  const specs: (RowSpec | [RowSpec, RowSpec])[] = [];
  if (f.rows.has("memory"))
    for (const sp of [1, 2] as const)
      for (const mode of MODES) for (const seq of [n1, n2]) specs.push({ group: "memory", sp, mode, seq, task: "text", vocab: 256, steps: 2, untimed: 1 });
  if (f.rows.has("vocab"))
    for (const vocab of [256, 32768])
      for (const seq of [v1, v2]) specs.push({ group: "vocab", sp: 2, mode: "default", seq, task: "recall", vocab, steps: 2, untimed: 1 });
  if (f.rows.has("speed"))
    for (const seq of f.speedSeq) {
      const row = (sp: 1 | 2): RowSpec => ({ group: "speed", sp, mode: "default", seq, task: "text", vocab: 256, steps: f.speedSteps, untimed: f.speedWarmup });
      specs.push([row(1), row(2)]);
    }
  if (f.long) specs.push({ group: "long", sp: 2, mode: "lean", seq: 131072, task: "text", vocab: 256, steps: 1, untimed: 0 });

  const rows: RowResult[] = [];
  const report = (r: RowResult, ratios?: number[]) => {
    rows.push(r);
    console.log(
      `${r.group.padEnd(6)} SP ${r.sp} ${r.mode.padEnd(5)} ${r.task}${r.task === "recall" ? ` vocab ${r.vocab}` : ""} N=${r.seq}: ` +
        `peak ${gib(r.peakBytes)}${r.peaks.length > 1 ? ` (median of ${r.peaks.map((b) => mib(b)).join(", ")})` : ""} (account ${gib(r.estimate.bytes)}, ${(r.estimate.bytes / r.peakBytes).toFixed(2)}x), ` +
        `${r.tokensPerSec.toFixed(0)} tok/s${r.speeds.length > 1 ? ` (median of ${r.speeds.map((t) => t.toFixed(0)).join(", ")})` : ""}, MFU ${(100 * r.mfu).toFixed(1)}% ` +
        `(MatMul rate ${gflops(r.rates)} GFLOP/s), ${r.wallSeconds.toFixed(0)} s` +
        (ratios ? `; SP 1 / SP 2 by pair of runs ${ratios.map((x) => x.toFixed(2)).join(", ")}` : ""),
    );
  };
  try {
    for (const spec of specs) {
      if (Array.isArray(spec)) {
        const [sp1, sp2] = await runSpeedPair(spec, f.speedRepeat, dataFile, outRoot);
        report(sp1, pairRatios(sp1, sp2));
        report(sp2);
      } else {
        report(await runRow(spec, spec.group === "long" ? 1 : f.repeat, dataFile, outRoot));
      }
    }
  } finally {
    fs.rmSync(dataFile, { force: true });
  }
  machine.loadAfter = os.loadavg();

  const lines: string[] = [];
  const checks: string[] = [];
  const check = (ok: boolean, what: string) => checks.push(`${ok ? "PASS" : "FAIL"} ${what}`);
  lines.push("# bench:memory", "", `Machine: ${describeMachine(machine)}.`, "");
  lines.push(
    `Model: 2 layers, hidden 256, 8 heads / 8 kv heads, GELU MLP x4, batch 1, fp32. LM head untied. Plain = every tiling off (\`--tile-mlp 0 --tile-loss 0\`), for reference; default = the trainer's defaults (\`--tile-mlp auto --tile-loss auto\`: the MLP in tiles of 2048 tokens past 2048 tokens per rank, the loss in tiles of at most 4 MiB of logits but at least 256 rows, 256 rows at vocab 32768 and 4096 at vocab 256, so untiled up to 4096 tokens per rank); lean = default + \`--activation-checkpointing --tile-attention auto\` (attention in head groups: 8 at SP 1, 4 at SP 2). Memory rows run with \`--no-memory-arena\` (ONNX Runtime arenas off, glibc's mmap threshold fixed: freed buffers go back to the OS; V8 collects freed tensors every 16 MiB of op outputs per rank), ${f.repeat} run${f.repeat > 1 ? "s" : ""} each (the peak is their median); speed rows with the trainer's default allocation (\`--memory-arena auto\`: arenas and glibc's heap when they fit, as here), ${f.speedRepeat} run${f.speedRepeat > 1 ? "s" : ""} each (tokens/s and MFU are their medians; every run's tokens/s is in the speed table).`,
    "",
  );
  lines.push("## Peak RSS", "", "| rows | SP | mode | task | N | peak RSS | runs | account | account / peak |", "|---|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    lines.push(
      `| ${r.group} | ${r.sp} | ${r.mode} | ${r.task}${r.task === "recall" ? ` (vocab ${r.vocab})` : ""} | ${r.seq} | ${gib(r.peakBytes)} | ${r.peaks.map((b) => mib(b)).join(", ")} | ${gib(r.estimate.bytes)} | ${(r.estimate.bytes / r.peakBytes).toFixed(2)} |`,
    );
  }
  lines.push(
    "",
    "## Slopes of peak RSS per token",
    "",
    `Between N = ${n1} and ${n2}, of the median peaks. The targets: without checkpointing (the default rows) at most 40 KiB, with checkpointing and tiling (lean) at most 10; plain, every tiling off, has none.`,
    "",
    "| SP | mode | slope |",
    "|---|---|---|",
  );
  for (const sp of [1, 2] as const)
    for (const mode of MODES) {
      const s = slope(rows, n1, n2, (r) => r.group === "memory" && r.sp === sp && r.mode === mode);
      if (s === null) continue;
      lines.push(`| ${sp} | ${mode} | ${kibPerToken(s)} |`);
      if (mode === "plain") continue;
      const target = mode === "lean" ? 10 : 40;
      check(s <= target * KiB, `SP ${sp} ${mode}: slope ${kibPerToken(s)}/token <= ${target} KiB`);
    }
  const v256 = slope(rows, v1, v2, (r) => r.group === "vocab" && r.vocab === 256);
  const v32k = slope(rows, v1, v2, (r) => r.group === "vocab" && r.vocab === 32768);
  if (v256 !== null && v32k !== null) {
    lines.push(
      "",
      `Recall task, SP 2, default (loss tiled), N = ${v1} to ${v2}: slope ${kibPerToken(v256)}/token at vocab 256, ${kibPerToken(v32k)}/token at vocab 32768 (${(v32k / v256).toFixed(2)}x).`,
    );
    check(Math.abs(v32k / v256 - 1) <= 0.1, `vocab 32768 slope within 10% of vocab 256 (${(v32k / v256).toFixed(2)}x)`);
  }
  const worst = Math.max(...rows.map((r) => Math.abs(r.estimate.bytes / r.peakBytes - 1)));
  check(worst <= 0.15, `memory account within 15% of the measured peak at every row (worst ${(100 * worst).toFixed(1)}%)`);

  const speed = rows.filter((r) => r.group === "speed");
  if (speed.length > 0) {
    lines.push(
      "",
      "## Speed (default)",
      "",
      `${f.speedSteps} steps a run, the first ${f.speedWarmup} not timed; tokens/s and MFU: the median over the runs of each run's median over its timed steps. ` +
        "SP 1's and SP 2's runs alternate (SP 1 first in odd pairs, SP 2 first in even ones); SP 1 / SP 2 is the median over the pairs of their ratio (each pair's in the by-pair column). " +
        "Each run's MFU is against the MatMul rate that run's trainer measured at start-up (GFLOP/s, in run order in the rates columns).",
      "",
      "| N | SP 1 tok/s | SP 1 MFU | SP 2 tok/s | SP 2 MFU | SP 1 / SP 2 | by pair | SP 1 runs | SP 2 runs | SP 1 rates | SP 2 rates |",
      "|---|---|---|---|---|---|---|---|---|---|---|",
    );
    for (const seq of f.speedSeq) {
      const a = speed.find((r) => r.sp === 1 && r.seq === seq);
      const b = speed.find((r) => r.sp === 2 && r.seq === seq);
      if (!a || !b) continue;
      const ratios = pairRatios(a, b);
      const ratio = median(ratios);
      lines.push(
        `| ${seq} | ${a.tokensPerSec.toFixed(0)} | ${(100 * a.mfu).toFixed(1)}% | ${b.tokensPerSec.toFixed(0)} | ${(100 * b.mfu).toFixed(1)}% | ${ratio.toFixed(2)} | ${ratios.map((x) => x.toFixed(2)).join(", ")} | ${a.speeds.map((t) => t.toFixed(0)).join(", ")} | ${b.speeds.map((t) => t.toFixed(0)).join(", ")} | ${gflops(a.rates)} | ${gflops(b.rates)} |`,
      );
      check(b.mfu >= 0.7, `SP 2 MFU at N = ${seq}: ${(100 * b.mfu).toFixed(1)}% >= 70%`);
      check(ratio >= 0.9, `SP 1 at N = ${seq}: ${ratio.toFixed(2)} of SP 2 (median over pairs of runs) >= 0.90`);
    }
  }
  const long = rows.find((r) => r.group === "long");
  if (long) {
    lines.push(
      "",
      `## N = 131072`,
      "",
      `One lean step at SP 2: peak RSS ${gib(long.peakBytes)}, step ${(long.stepMs / 1000).toFixed(0)} s, wall ${long.wallSeconds.toFixed(0)} s.`,
    );
    check(long.peakBytes <= 3 * 2 ** 30, `N = 131072, SP 2, lean: peak ${gib(long.peakBytes)} <= 3 GiB`);
  }
  lines.push("", "## The account, term by term (largest row of each mode)", "");
  for (const mode of MODES) {
    const r = rows.filter((x) => x.group === "memory" && x.mode === mode && x.sp === 2).at(-1);
    if (!r) continue;
    lines.push(`SP 2, ${mode}, N = ${r.seq}: measured ${gib(r.peakBytes)}, account ${gib(r.estimate.bytes)}`, "", "| term | MiB |", "|---|---|");
    for (const t of r.estimate.terms) lines.push(`| ${t.name} | ${(t.bytes / MiB).toFixed(1)} |`);
    lines.push("");
  }
  lines.push("## Targets", "", ...checks.map((c) => `- ${c}`), "", "## Commands", "", ...rows.map((r) => `- \`${r.command}\``), "");
  fs.writeFileSync(path.join(outRoot, "memory.md"), lines.join("\n"));
  fs.writeFileSync(path.join(outRoot, "memory.json"), `${JSON.stringify({ machine, rows }, null, 2)}\n`);
  console.log(`\n${checks.join("\n")}\n\nwrote ${path.relative(REPO_ROOT, path.join(outRoot, "memory.md"))} and memory.json`);
}

await main();
