/**
 * `pnpm bench:paper`: reproduces DeepSpeed-Ulysses' claims with this
 * project's own system on this machine and checks the cluster projection
 * against the measurements of the same run. Sections: communication volume
 * (weak and strong scaling, measured bytes next to the formulas), throughput
 * and MFU (Ulysses vs the all-gather-KV baseline), maximum sequence length
 * under a per-rank memory cap, convergence at SP = 1, 2, 4, the projection
 * check, and the A100 cluster projection. Writes bench-results/paper.md,
 * paper.json and paper-*.svg, and tools/project/profiles/this-machine*.json.
 * Never part of `test`. Flags: see paper-flags.ts (`--help`);
 * `--rerender FILE` renders a recorded run's paper.json again.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describeMachine, machineInfo } from "./machine-info.js";
import { measureBlocks, type BlockMeasurements } from "./measure-blocks.js";
import { bestRates, measureConvergence, measureKernelRates, REPO_ROOT, runClusterProjection, type ConvergenceRun } from "./measure-children.js";
import { paperCharts } from "./paper-charts.js";
import { readCommandLine } from "../cli-flags.js";
import { PAPER_HELP, parsePaperFlags, parseRerender, type PaperFlags } from "./paper-flags.js";
import { renderPaper, type PaperData } from "./paper-render.js";
import { runProjectionCheck, type ProjectionCheck } from "./projection-section.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

const log = (line: string) => process.stderr.write(`${line}\n`);

/** Runs `fn`; a failure is recorded (for paper.md and the exit code) instead of thrown. */
async function attempt<T>(failures: string[], section: string, fn: () => Promise<T> | T): Promise<T | null> {
  try {
    return await fn();
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    failures.push(
      `${section}: ${message
        .split("\n")
        .filter((l) => l.trim() !== "")
        .slice(0, 4)
        .join(" / ")}`,
    );
    log(`${section} FAILED: ${message}`);
    return null;
  }
}

/** The projection check (from the data), charts, paper.md and paper.json. */
async function writePaper(data: PaperData, f: PaperFlags, outDir: string): Promise<void> {
  const check: ProjectionCheck | null = f.skip.has("projection")
    ? null
    : await attempt(data.failures, "projection check", () =>
        runProjectionCheck(f, data.machine, data.rates, data.blocks.rows, data.blocks.allToAll, data.blocks.worldRates ?? [], data.command),
      );
  const charts = paperCharts(f, data.blocks.rows, data.blocks.maxSeq, data.convergence, check);
  for (const [name, svg] of Object.entries(charts)) fs.writeFileSync(path.join(outDir, name), svg);
  const markdown = renderPaper(data, f, check);
  const mdFile = path.join(outDir, "paper.md");
  fs.writeFileSync(mdFile, markdown);
  const json = { ...data, flags: { ...f, skip: [...f.skip] }, projectionCheck: check, charts: Object.keys(charts) };
  fs.writeFileSync(path.join(outDir, "paper.json"), `${JSON.stringify(json, null, 2)}\n`);
  process.stdout.write(`${markdown}\n`);
  log(`wrote ${path.relative(process.cwd(), mdFile)}, paper.json and ${Object.keys(charts).length} charts (run of ${data.seconds.toFixed(0)} s)`);
  if (data.failures.length > 0) {
    log(`${data.failures.length} section(s) failed:\n${data.failures.join("\n")}`);
    process.exitCode = 1;
  }
}

/** Renders a recorded run again: paper.json's measurements, the current cost model. */
async function rerender(file: string): Promise<void> {
  const recorded = JSON.parse(fs.readFileSync(file, "utf8")) as PaperData & { flags: Omit<PaperFlags, "skip"> & { skip: string[] } };
  const f: PaperFlags = { ...recorded.flags, skip: new Set(recorded.flags.skip) };
  const data: PaperData = { ...recorded, failures: recorded.failures.filter((x) => !x.startsWith("projection check:")) };
  await writePaper(data, f, path.dirname(path.resolve(file)));
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2).filter((a) => a !== "--");
  if (argv[0] === "--rerender") return rerender(readCommandLine(PAPER_HELP, argv, (words) => parseRerender(words, REPO_ROOT)));
  const f = readCommandLine(PAPER_HELP, argv, parsePaperFlags);
  const command = `pnpm bench:paper${argv.length > 0 ? ` ${argv.join(" ")}` : ""}`;
  const outDir = path.resolve(REPO_ROOT, f.out ?? "bench-results");
  fs.mkdirSync(outDir, { recursive: true });
  const started = performance.now();
  const startedAt = new Date().toISOString();
  const info = machineInfo();
  log(`bench:paper${f.quick ? " --quick" : ""}: ${describeMachine(info)}`);

  log("kernel rates:");
  const ratesBefore = await measureKernelRates(f, log);
  log("block steps (threads backend):");
  const blocks: BlockMeasurements = await measureBlocks(f, log);
  log("kernel rates again (the best of the two measurements is kept):");
  const rates = bestRates(ratesBefore, await measureKernelRates(f, log));
  // The later sections fail on their own: a failure is reported in paper.md and the exit code, the rest still runs.
  const failures: string[] = [];
  let runs: ConvergenceRun[] = [];
  if (!f.skip.has("convergence")) {
    log("convergence (trainer CLI):");
    runs = (await attempt(failures, "convergence", () => measureConvergence(f, outDir, log))) ?? [];
  }
  log("cluster projection (A100 profile, 32 and 64 devices):");
  const cluster = (await attempt(failures, "cluster projection", () => runClusterProjection(outDir))) ?? { dir: path.join(outDir, "project"), files: [] };
  info.loadAfter = os.loadavg();
  const seconds = (performance.now() - started) / 1000;
  await writePaper({ command, startedAt, seconds, machine: info, rates, blocks, convergence: runs, cluster, failures }, f, outDir);
}

main().then(
  () => process.exit(process.exitCode ?? 0),
  (error: unknown) => {
    process.stderr.write(`bench:paper failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  },
);
