/**
 * The projection against the DeepSpeed-Ulysses blog's dense-attention
 * throughput (7B on 32 A100s, 30B on 64) and against the Megatron-SP table
 * of Megatron-DeepSpeed's README, point by point. The runs are modelled as
 * the sources describe them (README, "Against the DeepSpeed-Ulysses blog"):
 *
 * - Ulysses: SP degree and micro-batch searched for the highest throughput
 *   ("We chose the sequence parallelism degree and micro-batch size that
 *   produced the best performance"), ZeRO-3 over all GPUs ("ZeRO-3
 *   parallelism degrees of 32 and 64"), full activation checkpointing, q, k
 *   and v in three all-to-alls (DeepSpeed's DistributedAttention);
 * - Megatron-LM: tensor = sequence parallel degree and micro-batch searched
 *   the same way, no ZeRO, full activation checkpointing (the DeepSpeed
 *   team's Megatron-SP script, pretrain_gpt_30B_seq_parallel.sh);
 *
 * and compared in the unit the charts use: Megatron-DeepSpeed's TFLOP/s
 * (`reportedTflopsPerDevice`).
 */
import { project, type GptShape, type Projection, type RunShape } from "./cost-model.js";
import { BLOG_CHART_POINTS, BLOG_MODELS, BLOG_TEXT_CLAIMS, MEGATRON_DS_TABLE, type PublishedPoint } from "./blog-data.js";
import type { HardwareProfile } from "./profile.js";

export interface ComparedPoint {
  published: PublishedPoint;
  /** The configuration the search picked (undefined: nothing fits in memory). */
  predicted?: Projection;
  /** (predicted − published) / published, percent; undefined where either side is out of memory. */
  errorPercent?: number;
  /** Whether the published point and the prediction agree on out-of-memory. */
  oomAgrees: boolean;
}

const MICRO_BATCHES = [1, 2, 4, 8, 16, 32];

/** The run the blog describes for `system` at one degree and micro-batch. */
export function blogRun(system: "ulysses" | "megatron", devices: number, degree: number, seqLen: number, microBatch: number): RunShape {
  return {
    scheme: system,
    devices,
    degree,
    seqLen,
    microBatch,
    globalBatchTokens: (devices / degree) * microBatch * seqLen,
    zeroStage: system === "ulysses" ? 3 : 0,
    activationCheckpointing: true,
    causal: true,
    fusedQkv: false,
  };
}

/** The highest Megatron-DeepSpeed TFLOP/s over power-of-two degrees and micro-batches that fit in memory; undefined if none fits. */
export function bestBlogConfiguration(
  model: GptShape,
  system: "ulysses" | "megatron",
  devices: number,
  seqLen: number,
  hw: HardwareProfile,
): Projection | undefined {
  let best: Projection | undefined;
  for (let d = 1; d <= Math.min(devices, model.heads); d *= 2) {
    if (devices % d !== 0 || seqLen % d !== 0) continue;
    for (const b of MICRO_BATCHES) {
      const p = project(model, blogRun(system, devices, d, seqLen, b), hw);
      if (p.outOfMemory) break;
      if (best === undefined || p.reportedTflopsPerDevice > best.reportedTflopsPerDevice) best = p;
    }
  }
  return best;
}

function compare(published: PublishedPoint, predicted: Projection | undefined): ComparedPoint {
  const oomAgrees = (published.tflops === undefined) === (predicted === undefined || predicted.outOfMemory);
  const point: ComparedPoint = { published, oomAgrees, ...(predicted === undefined ? {} : { predicted }) };
  if (published.tflops !== undefined && predicted !== undefined && !predicted.outOfMemory) {
    point.errorPercent = (100 * (predicted.reportedTflopsPerDevice - published.tflops)) / published.tflops;
  }
  return point;
}

/** Every chart point of the blog, predicted with the best configuration the model finds. */
export function compareWithBlog(hw: HardwareProfile): ComparedPoint[] {
  return BLOG_CHART_POINTS.map((pt) => compare(pt, bestBlogConfiguration(BLOG_MODELS[pt.model], pt.system, pt.devices, pt.seqLen, hw)));
}

/** The Megatron-DeepSpeed README table: its configuration exactly (TP 32 on 32 GPUs, micro-batch 1, global batch 2, ZeRO 0, checkpointing). */
export function compareWithMegatronDeepSpeedTable(hw: HardwareProfile): ComparedPoint[] {
  return MEGATRON_DS_TABLE.map((pt) => {
    const run: RunShape = { ...blogRun("megatron", 32, 32, pt.seqLen, 1), globalBatchTokens: 2 * pt.seqLen };
    const p = project(BLOG_MODELS["30B"], run, hw);
    const point = compare(pt, p);
    // The source ran these: report the error even where the memory model says out of memory.
    point.errorPercent = (100 * (p.reportedTflopsPerDevice - pt.tflops!)) / pt.tflops!;
    return point;
  });
}

const k = (n: number) => `${n / 1024}K`;
const f1 = (x: number) => x.toFixed(1);
const signed = (x: number | undefined) => (x === undefined ? "-" : `${x >= 0 ? "+" : ""}${x.toFixed(1)}%`);

function configuration(p: Projection): string {
  const r = p.run;
  return `d=${r.degree}, b=${r.microBatch}${p.outOfMemory ? `, OOM ${(p.memoryBytes.total / 2 ** 30).toFixed(0)} GiB` : ""}`;
}

function table(points: readonly ComparedPoint[]): string[] {
  const lines = [
    "| model | GPUs | sequence | system | published TFLOP/s | from | predicted (Megatron-DS count) | error | configuration | model TFLOP/s | hardware TFLOP/s |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const c of points) {
    const pub = c.published;
    const shown =
      pub.tflops === undefined ? "OOM" : pub.range !== undefined ? `${f1(pub.tflops)} (${pub.range[0]}-${pub.range[1]}, behind legend)` : f1(pub.tflops);
    const p = c.predicted;
    const predicted = p === undefined ? "OOM (no fit)" : p.outOfMemory ? `${f1(p.reportedTflopsPerDevice)} (OOM)` : f1(p.reportedTflopsPerDevice);
    lines.push(
      `| ${pub.model} | ${pub.devices} | ${k(pub.seqLen)} | ${pub.system === "ulysses" ? "Ulysses" : "Megatron-LM"} | ${shown} | ${pub.from} | ${predicted} | ` +
        `${signed(c.errorPercent)}${c.oomAgrees ? "" : " (OOM disagrees)"} | ${p === undefined ? "-" : configuration(p)} | ` +
        `${p === undefined ? "-" : f1(p.tflopsPerDevice)} | ${p === undefined ? "-" : f1(p.hardwareTflopsPerDevice)} |`,
    );
  }
  const errors = points.flatMap((c) => (c.errorPercent === undefined ? [] : [Math.abs(c.errorPercent)]));
  if (errors.length > 0) {
    const mean = errors.reduce((a, b) => a + b, 0) / errors.length;
    lines.push(
      "",
      `Points compared: ${errors.length}; mean |error| ${mean.toFixed(1)}%, worst ${Math.max(...errors).toFixed(1)}%; out-of-memory agreement ${points.filter((c) => c.oomAgrees).length} of ${points.length}.`,
    );
  }
  return lines;
}

/** The comparison report (markdown) and its data. */
export function blogComparisonReport(hw: HardwareProfile): { markdown: string; json: unknown } {
  const blog = compareWithBlog(hw);
  const megatronTable = compareWithMegatronDeepSpeedTable(hw);
  const ulyssesMax = Math.max(
    ...blog.flatMap((c) => (c.published.system === "ulysses" && c.predicted && !c.predicted.outOfMemory ? [c.predicted.reportedTflopsPerDevice] : [])),
  );
  const ratios = BLOG_CHART_POINTS.filter((p) => p.system === "ulysses").flatMap((u) => {
    const find = (system: string) =>
      blog.find((c) => c.published.model === u.model && c.published.seqLen === u.seqLen && c.published.system === system)?.predicted;
    const pu = find("ulysses");
    const pm = find("megatron");
    return pu && pm && !pu.outOfMemory && !pm.outOfMemory ? [pu.reportedTflopsPerDevice / pm.reportedTflopsPerDevice] : [];
  });
  const claims = BLOG_TEXT_CLAIMS;
  const lines = [
    `# Against the DeepSpeed-Ulysses blog (${hw.name})`,
    "",
    "TFLOP/s per GPU counted as Megatron-DeepSpeed printed them in 2023 (24·f·B·s·L·h²·(1 + s/6h + V/16Lh), f = 4 with checkpointing: full s² attention, recomputation counted), the unit of the blog's charts; the model and hardware TFLOP/s of the same prediction beside it. Configurations as the blog and the DeepSpeed team's scripts describe them (tools/project/README.md).",
    "",
    "## The blog's charts (Figures 3 and 4)",
    "",
    "The charts are PNG images without value labels: `chart` values are bar heights measured in the images (±0.3 TFLOP/s), not numbers the authors wrote. The text states no per-point value.",
    "",
    ...table(blog),
    "",
    "## The blog's text",
    "",
    `- "${claims.sustainedTflops.quote}": the highest predicted Ulysses point is ${f1(ulyssesMax)} TFLOP/s (Megatron-DS count).`,
    `- "${claims.speedup.quote}": predicted Ulysses / Megatron-LM ratio ${ratios.length > 0 ? `${f1(Math.min(...ratios))}x to ${f1(Math.max(...ratios))}x` : "n/a"} over the points where both fit.`,
    `- "${claims.longerSequence.quote}": see the OOM columns above (the charts show Megatron-LM OOM at 256K for 7B and from 128K for 30B).`,
    "",
    "## Megatron-DeepSpeed's Megatron-SP table (text)",
    "",
    "GPT 30B on 32 GPUs (4 DGX A100-40GB), TP = SP = 32, micro-batch 1, global batch 2, no ZeRO, checkpointing; the configuration is the source's, not searched. Errors are reported even where the memory model says OOM (the source ran them).",
    "",
    ...table(megatronTable),
  ];
  return { markdown: lines.join("\n"), json: { profile: hw.name, blog, megatronDeepSpeedTable: megatronTable, ulyssesMaxPredicted: ulyssesMax, ratios } };
}
