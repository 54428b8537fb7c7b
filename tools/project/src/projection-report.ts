/**
 * The projection report of `pnpm project`: per model and device count, the
 * throughput of Ulysses, Megatron-SP and ring attention against sequence
 * length (model and hardware TFLOP/s), the (u, r) split of a hybrid the
 * model predicts fastest, and one SVG chart each.
 */
import { lineChart } from "@ulysses/measure";
import { BLOG_MODELS } from "./blog-data.js";
import { bestProjection, parameterCount, project, type GptShape, type Projection } from "./cost-model.js";
import { bestFactorization } from "./factorization.js";
import type { HardwareProfile } from "./profile.js";
import type { RingLayout } from "./sp-cost.js";

export const PAPER_MODELS: GptShape[] = [
  { name: "GPT 1.2B", layers: 24, hidden: 2048, heads: 32, vocab: 50304, ffnMultiplier: 4 },
  BLOG_MODELS["7B"],
  BLOG_MODELS["30B"],
];

export const SEQUENCE_LENGTHS = [8, 16, 32, 64, 128, 256, 512, 1024].map((k) => k * 1024);

export interface ReportOptions {
  devices: number[];
  zeroUlysses: 0 | 1 | 2 | 3;
  zeroMegatron: 0 | 1 | 2 | 3;
  globalBatchTokens: number;
  /** Causal layout of the ring and hybrid runs. */
  layout: RingLayout;
}

export const kTokens = (n: number) => (n >= 1024 * 1024 ? `${n / (1024 * 1024)}M` : `${n / 1024}K`);

function cell(p: Projection | undefined): string {
  if (!p) return "n/a";
  if (p.outOfMemory) return `OOM (${(p.memoryBytes.total / 2 ** 30).toFixed(0)} GiB at d=${p.run.degree})`;
  return `${p.tflopsPerDevice.toFixed(1)} / ${p.hardwareTflopsPerDevice.toFixed(1)} (d=${p.run.degree})`;
}

const short = (p: Projection) => (p.outOfMemory ? "OOM" : p.tflopsPerDevice.toFixed(1));

/** The largest power of two that divides `devices` and is at most the model's heads. */
export function fullDegree(model: GptShape, devices: number): number {
  let d = 1;
  while (d * 2 <= Math.min(devices, model.heads) && devices % (d * 2) === 0) d *= 2;
  return d;
}

export function runProjection(hw: HardwareProfile, options: ReportOptions): { markdown: string; json: unknown; charts: Record<string, string> } {
  const lines: string[] = [`# Projection: ${hw.name}`, "", `Profile: ${hw.source}`, ""];
  const json: Record<string, unknown>[] = [];
  const charts: Record<string, string> = {};
  for (const model of PAPER_MODELS) {
    for (const devices of options.devices) {
      lines.push(`## ${model.name} (${(parameterCount(model) / 1e9).toFixed(2)}B parameters) on ${devices} devices`, "");
      const degree = fullDegree(model, devices);
      lines.push(
        `TFLOP/s per device, model / hardware (hardware counts the recomputed forward of activation checkpointing: 4 passes instead of 3). Every scheme parallelises each sequence over d = ${degree} devices (the largest power of two dividing the devices and at most the heads; data parallel over the rest); ring uses the ${options.layout} layout; "best" is the highest-throughput power-of-two degree that fits in memory. OOM: over ${hw.memoryGiB} GiB per device.`,
        "",
      );
      lines.push(
        "| sequence | Ulysses | Megatron-SP | Ring | Ulysses / Megatron | SP bytes/device/sequence, Ulysses | Megatron | Ring | Ulysses best | Megatron best |",
      );
      lines.push("|---|---|---|---|---|---|---|---|---|---|");
      const series: Record<"ulysses" | "megatron" | "ring", { x: number; y: number | null }[]> = { ulysses: [], megatron: [], ring: [] };
      const splits: string[] = [];
      let splitHeader: number[] = [];
      for (const seqLen of SEQUENCE_LENGTHS) {
        const base = { devices, seqLen, microBatch: 1, globalBatchTokens: options.globalBatchTokens, activationCheckpointing: true, causal: true };
        const ulyssesRun = { ...base, scheme: "ulysses" as const, zeroStage: options.zeroUlysses };
        const megatronRun = { ...base, scheme: "megatron" as const, zeroStage: options.zeroMegatron };
        const ringRun = { ...base, scheme: "ring" as const, zeroStage: options.zeroUlysses, layout: options.layout };
        const u = project(model, { ...ulyssesRun, degree }, hw);
        const m = project(model, { ...megatronRun, degree }, hw);
        const ring = project(model, { ...ringRun, degree }, hw);
        const ub = bestProjection(model, ulyssesRun, hw);
        const mb = bestProjection(model, megatronRun, hw);
        const ratio = !u.outOfMemory && !m.outOfMemory ? (u.tflopsPerDevice / m.tflopsPerDevice).toFixed(2) : "-";
        const gb = (p: Projection) => `${(p.parallelBytesPerDevice / 1e9).toFixed(2)} GB`;
        lines.push(
          `| ${kTokens(seqLen)} | ${cell(u)} | ${cell(m)} | ${cell(ring)} | ${ratio} | ${gb(u)} | ${gb(m)} | ${gb(ring)} | ${cell(ub)} | ${cell(mb)} |`,
        );
        series.ulysses.push({ x: seqLen, y: u.outOfMemory ? null : u.tflopsPerDevice });
        series.megatron.push({ x: seqLen, y: m.outOfMemory ? null : m.tflopsPerDevice });
        series.ring.push({ x: seqLen, y: ring.outOfMemory ? null : ring.tflopsPerDevice });
        const { best, all } = bestFactorization(model, { ...base, degree, zeroStage: options.zeroUlysses, layout: options.layout }, hw);
        splitHeader = all.map((f) => f.ulyssesDegree);
        splits.push(
          `| ${kTokens(seqLen)} | u=${best.ulyssesDegree} × r=${best.ringDegree} | ${short(best.projection)} / ${best.projection.outOfMemory ? "OOM" : best.projection.hardwareTflopsPerDevice.toFixed(1)} | ${all.map((f) => short(f.projection)).join(" | ")} |`,
        );
        json.push({
          model: model.name,
          devices,
          seqLen,
          degree,
          ulysses: u,
          megatron: m,
          ring,
          ulyssesBest: ub,
          megatronBest: mb,
          bestSplit: { ulyssesDegree: best.ulyssesDegree, ringDegree: best.ringDegree, projection: best.projection },
          splits: all.map((f) => ({
            ulyssesDegree: f.ulyssesDegree,
            ringDegree: f.ringDegree,
            tflopsPerDevice: f.projection.tflopsPerDevice,
            outOfMemory: f.projection.outOfMemory,
          })),
        });
      }
      lines.push("");
      lines.push(
        `Hybrid split of the d = ${degree} SP ranks into u Ulysses ranks × r ring groups (u ≤ heads; ${options.layout} layout): the fastest that fits in memory, and model TFLOP/s per device of every split.`,
        "",
        `| sequence | fastest (u × r) | model / hardware TFLOP/s | ${splitHeader.map((u) => `u=${u}, r=${degree / u}${u === 1 ? " (ring)" : u === degree ? " (Ulysses)" : ""}`).join(" | ")} |`,
        `|---|---|---|${splitHeader.map(() => "---").join("|")}|`,
        ...splits,
        "",
      );
      const name = `${model.name.replace(/\W+/g, "-").toLowerCase()}-${devices}dev.svg`;
      charts[name] = lineChart(
        [
          { name: "Ulysses", points: series.ulysses },
          { name: "Megatron-SP", points: series.megatron, dash: "6 3" },
          { name: `Ring (${options.layout})`, points: series.ring, dash: "2 2" },
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
