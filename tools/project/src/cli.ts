/**
 * `pnpm project`: projects Ulysses and Megatron-style sequence parallelism to
 * cluster scale from a hardware profile and writes markdown tables, JSON and
 * SVG charts (throughput per device against sequence length, 8K to 1M tokens,
 * for 1.2B, 7B and 30B GPTs on 32 and 64 devices).
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { lineChart } from "@ulysses/measure";
import { bestProjection, parameterCount, project, type GptShape, type Projection, type Scheme } from "./cost-model.js";
import { parseProfile, ProjectionError, type HardwareProfile } from "./profile.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

export const PAPER_MODELS: GptShape[] = [
  { name: "GPT 1.2B", layers: 24, hidden: 2048, heads: 32, vocab: 50304, ffnMultiplier: 4 },
  { name: "GPT 7B", layers: 32, hidden: 4096, heads: 32, vocab: 50304, ffnMultiplier: 4 },
  { name: "GPT 30B", layers: 48, hidden: 7168, heads: 56, vocab: 50304, ffnMultiplier: 4 },
];

export const SEQUENCE_LENGTHS = [8, 16, 32, 64, 128, 256, 512, 1024].map((k) => k * 1024);

const HELP = `Usage: pnpm project [options]

Projects one training step of a GPT under Ulysses and Megatron-style sequence
parallelism from a hardware profile (see tools/project/README.md).

Options:
  --profile FILE     hardware profile JSON (default profiles/a100-40gb-nvlink-ib.json)
  --out DIR          output folder (default bench-results/project)
  --devices LIST     device counts, comma-separated (default 32,64)
  --zero-ulysses N   ZeRO stage for Ulysses (default 3)
  --zero-megatron N  ZeRO stage for Megatron (default 1)
  --global-batch-tokens N  tokens per optimizer step (default 4194304)
  --help             this text
`;

export interface Options {
  profile: string;
  out: string;
  devices: number[];
  zeroUlysses: 0 | 1 | 2 | 3;
  zeroMegatron: 0 | 1 | 2 | 3;
  globalBatchTokens: number;
}

const FLAGS = {
  profile: { type: "string" },
  out: { type: "string" },
  devices: { type: "string" },
  "zero-ulysses": { type: "string" },
  "zero-megatron": { type: "string" },
  "global-batch-tokens": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

/**
 * The options of a command line (without node and the script; the `--` pnpm
 * may pass through is skipped), or undefined for --help. Throws a
 * ProjectionError naming the flag and its value.
 */
export function parseOptions(argv: readonly string[]): Options | undefined {
  let values: ReturnType<typeof parseArgs<{ args: string[]; options: typeof FLAGS; strict: true; allowPositionals: false }>>["values"];
  try {
    ({ values } = parseArgs({ args: argv.filter((word) => word !== "--"), options: FLAGS, strict: true, allowPositionals: false }));
  } catch (cause) {
    throw new ProjectionError(`${(cause as Error).message} (see --help)`, { cause });
  }
  if (values.help === true) return undefined;
  const from = process.env.INIT_CWD ?? process.cwd();
  const here = path.dirname(fileURLToPath(import.meta.url));
  const stage = (flag: string, raw: string | undefined, fallback: 0 | 1 | 2 | 3): 0 | 1 | 2 | 3 => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (![0, 1, 2, 3].includes(n) || raw.trim() === "") throw new ProjectionError(`--${flag}: ZeRO stage must be 0, 1, 2 or 3, got '${raw}'`);
    return n as 0 | 1 | 2 | 3;
  };
  let devices = [32, 64];
  if (values.devices !== undefined) {
    devices = values.devices.split(",").map(Number);
    if (devices.some((d) => !Number.isInteger(d) || d < 1)) throw new ProjectionError(`--devices: expected positive integers, got '${values.devices}'`);
  }
  let globalBatchTokens = 4 * 1024 * 1024;
  if (values["global-batch-tokens"] !== undefined) {
    globalBatchTokens = Number(values["global-batch-tokens"]);
    if (!Number.isInteger(globalBatchTokens) || globalBatchTokens < 1)
      throw new ProjectionError(`--global-batch-tokens: expected a positive integer, got '${values["global-batch-tokens"]}'`);
  }
  return {
    profile: values.profile === undefined ? path.join(here, "..", "profiles", "a100-40gb-nvlink-ib.json") : path.resolve(from, values.profile),
    out: path.resolve(from, values.out ?? path.join("bench-results", "project")),
    devices,
    zeroUlysses: stage("zero-ulysses", values["zero-ulysses"], 3),
    zeroMegatron: stage("zero-megatron", values["zero-megatron"], 1),
    globalBatchTokens,
  };
}

export function loadProfile(file: string): HardwareProfile {
  let text: string;
  try {
    text = fs.readFileSync(file, "utf8");
  } catch (cause) {
    throw new ProjectionError(`cannot read profile '${file}': ${(cause as Error).message}`, { cause });
  }
  return parseProfile(JSON.parse(text), file);
}

const kTokens = (n: number) => (n >= 1024 * 1024 ? `${n / (1024 * 1024)}M` : `${n / 1024}K`);

function cell(p: Projection | undefined): string {
  if (!p) return "n/a";
  if (p.outOfMemory) return `OOM (${(p.memoryBytes.total / 2 ** 30).toFixed(0)} GiB at d=${p.run.degree})`;
  return `${p.tflopsPerDevice.toFixed(1)} (d=${p.run.degree})`;
}

/** The largest power of two that divides `devices` and is at most the model's heads. */
export function fullDegree(model: GptShape, devices: number): number {
  let d = 1;
  while (d * 2 <= Math.min(devices, model.heads) && devices % (d * 2) === 0) d *= 2;
  return d;
}

export function runProjection(options: Options): { markdown: string; json: unknown; charts: Record<string, string> } {
  const hw = loadProfile(options.profile);
  const lines: string[] = [`# Projection: ${hw.name}`, "", `Profile: ${hw.source}`, ""];
  const json: Record<string, unknown>[] = [];
  const charts: Record<string, string> = {};
  for (const model of PAPER_MODELS) {
    for (const devices of options.devices) {
      lines.push(`## ${model.name} (${(parameterCount(model) / 1e9).toFixed(2)}B parameters) on ${devices} devices`, "");
      const degree = fullDegree(model, devices);
      lines.push(
        `Model TFLOP/s per device. Both schemes parallelise each sequence over d = ${degree} devices (the largest power of two dividing the devices and at most the heads; data parallel over the rest); "best" is the highest-throughput power-of-two degree that fits in memory. OOM: over ${hw.memoryGiB} GiB per device.`,
        "",
      );
      lines.push("| sequence | Ulysses | Megatron-SP | Ulysses / Megatron | SP bytes/device/sequence, Ulysses | Megatron | Ulysses best | Megatron best |");
      lines.push("|---|---|---|---|---|---|---|---|");
      const series: Record<Scheme, { x: number; y: number | null }[]> = { ulysses: [], megatron: [] };
      for (const seqLen of SEQUENCE_LENGTHS) {
        const base = { devices, seqLen, microBatch: 1, globalBatchTokens: options.globalBatchTokens, activationCheckpointing: true, causal: true };
        const ulyssesRun = { ...base, scheme: "ulysses" as const, zeroStage: options.zeroUlysses };
        const megatronRun = { ...base, scheme: "megatron" as const, zeroStage: options.zeroMegatron };
        const u = project(model, { ...ulyssesRun, degree }, hw);
        const m = project(model, { ...megatronRun, degree }, hw);
        const ub = bestProjection(model, ulyssesRun, hw);
        const mb = bestProjection(model, megatronRun, hw);
        const ratio = !u.outOfMemory && !m.outOfMemory ? (u.tflopsPerDevice / m.tflopsPerDevice).toFixed(2) : "-";
        const gb = (p: Projection) => `${(p.parallelBytesPerDevice / 1e9).toFixed(2)} GB`;
        lines.push(`| ${kTokens(seqLen)} | ${cell(u)} | ${cell(m)} | ${ratio} | ${gb(u)} | ${gb(m)} | ${cell(ub)} | ${cell(mb)} |`);
        series.ulysses.push({ x: seqLen, y: u.outOfMemory ? null : u.tflopsPerDevice });
        series.megatron.push({ x: seqLen, y: m.outOfMemory ? null : m.tflopsPerDevice });
        json.push({ model: model.name, devices, seqLen, degree, ulysses: u, megatron: m, ulyssesBest: ub, megatronBest: mb });
      }
      lines.push("");
      const name = `${model.name.replace(/\W+/g, "-").toLowerCase()}-${devices}dev.svg`;
      charts[name] = lineChart(
        [
          { name: "Ulysses", points: series.ulysses },
          { name: "Megatron-SP", points: series.megatron, dash: "6 3" },
        ],
        {
          title: `${model.name}, ${devices} devices, d=${degree}: projected throughput`,
          xLabel: "sequence length (tokens; x = out of memory)",
          yLabel: "model TFLOP/s per device",
          logX: true,
          formatX: kTokens,
        },
      );
      lines.push(`![${model.name} on ${devices} devices](${name})`, "");
    }
  }
  return { markdown: lines.join("\n"), json: { profile: hw, rows: json }, charts };
}

function main(): void {
  let options: Options | undefined;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`project: ${(error as Error).message}\n`);
    process.exit(2);
  }
  if (!options) {
    process.stdout.write(HELP);
    return;
  }
  const result = runProjection(options);
  fs.mkdirSync(options.out, { recursive: true });
  fs.writeFileSync(path.join(options.out, "projection.md"), result.markdown);
  fs.writeFileSync(path.join(options.out, "projection.json"), JSON.stringify(result.json, null, 2));
  for (const [name, svg] of Object.entries(result.charts)) fs.writeFileSync(path.join(options.out, name), svg);
  process.stdout.write(`${result.markdown}\n\nwrote ${options.out}\n`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  try {
    main();
  } catch (error) {
    process.stderr.write(`project: ${(error as Error).message}\n`);
    process.exit(1);
  }
}
