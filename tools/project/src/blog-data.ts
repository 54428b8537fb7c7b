/**
 * Published throughput numbers the projection is compared with, and where
 * each comes from. Nothing here is computed: every number is quoted from a
 * source named next to it (see tools/project/README.md, "Against the
 * DeepSpeed-Ulysses blog").
 */
import type { GptShape } from "./cost-model.js";

/**
 * The blog's models. 7B: the GPT-3 6.7B shape (Brown et al. 2020, table 2.1:
 * 32 layers, d_model 4096, 32 heads); the blog names no shape. 30B: the
 * DeepSpeed team's own 30B scripts in Megatron-DeepSpeed
 * (examples_deepspeed/sequence_parallel/ds_pretrain_gpt_30B_seq_parallel_32k.sh
 * and examples_deepspeed/deepspeed4science/megatron_long_seq_support/pretrain_gpt_30B_seq_parallel.sh:
 * num_layers=64, hidden_size=6144, num_attn_heads=64). Vocabulary: GPT-2's
 * 50257 padded to 50304, as Megatron pads it.
 */
export const BLOG_MODELS: Record<"7B" | "30B", GptShape> = {
  "7B": { name: "GPT 7B", layers: 32, hidden: 4096, heads: 32, vocab: 50304, ffnMultiplier: 4 },
  "30B": { name: "GPT 30B", layers: 64, hidden: 6144, heads: 64, vocab: 50304, ffnMultiplier: 4 },
};

export const BLOG_URL = "https://github.com/microsoft/DeepSpeed/tree/master/blogs/deepspeed-ulysses";

/** One published point: TFLOP/s per GPU as printed by Megatron-DeepSpeed's throughput calculator (see megatronDeepSpeedFlops). */
export interface PublishedPoint {
  model: "7B" | "30B";
  devices: number;
  seqLen: number;
  system: "ulysses" | "megatron";
  /** The value; undefined when the chart shows "OOM" there. */
  tflops?: number;
  /** When part of the bar is hidden behind the legend: the range the visible pixels allow. */
  range?: [number, number];
  /** How the value was obtained: "text" (written as a number in the source) or "chart" (bar height measured in the PNG). */
  from: "text" | "chart";
  source: string;
}

const FIG3 = `${BLOG_URL} Figure 3 (media/dense7B.png, "Ulysses vs Megatron LM vs ColAI (7B GPT Dense Model)", 32 GPUs)`;
const FIG4 = `${BLOG_URL} Figure 4 (media/dense30B.png, "Ulysses vs Megatron LM vs ColAI (30B GPT Dense Model)", 64 GPUs)`;
const K = 1024;

function chart(model: "7B" | "30B", source: string, rows: [number, number | [number, number] | "OOM", number | "OOM"][]): PublishedPoint[] {
  const devices = model === "7B" ? 32 : 64;
  return rows.flatMap(([k, ulysses, megatron]) =>
    (
      [
        ["ulysses", ulysses],
        ["megatron", megatron],
      ] as const
    ).map(([system, v]): PublishedPoint => {
      const point: PublishedPoint = { model, devices, seqLen: k * K, system, from: "chart", source };
      if (Array.isArray(v)) return { ...point, range: v, tflops: (v[0] + v[1]) / 2 };
      return v === "OOM" ? point : { ...point, tflops: v };
    }),
  );
}

/**
 * The blog's dense-attention charts exist only as PNG bar charts without
 * value labels. These values are the bars' heights measured in the PNGs
 * (DeepSpeed master, blogs/deepspeed-ulysses/media/), not numbers printed by
 * the authors: the y axis ticks (0, 25, ... TFLOPs) sit at pixel rows found
 * by their tick marks (3.091 px per TFLOP/s in dense7B.png, 3.387 in
 * dense30B.png); a bar's top is its first row of bar colour from above, with
 * the anti-aliased edge row counted by its colour fraction: about ±0.3 TFLOP/s.
 * Two bars (7B 128K and 30B 128K Ulysses) end behind an opaque legend patch:
 * their range is the patch's extent, the value its midpoint.
 */
export const BLOG_CHART_POINTS: PublishedPoint[] = [
  ...chart("7B", FIG3, [
    [8, 158.8, 105.8],
    [16, 175.3, 142.7],
    [32, 177.6, 164.3],
    [64, 181.1, 164.6],
    [128, [175.3, 181.8], 157.9],
    [256, 174.4, "OOM"],
  ]),
  ...chart("30B", FIG4, [
    [8, 165.6, 44.9],
    [16, 157.4, 67.6],
    [32, 152.1, 85.6],
    [64, 147.0, 104.5],
    [128, [135.2, 141.1], "OOM"],
    [256, 134.1, "OOM"],
  ]),
];

/** What the blog states in words (its text, not its charts). */
export const BLOG_TEXT_CLAIMS = {
  sustainedTflops: {
    value: 175,
    quote: "sustained throughput of over 175 TFlops/GPU (over 54% of hardware peak)",
    source: `${BLOG_URL} (introduction, key properties)`,
  },
  speedup: { value: 2.5, quote: "throughput improvements of up to 2.5x", source: `${BLOG_URL} (introduction, key properties)` },
  longerSequence: { value: 4, quote: "4x larger sequence lengths than existing systems", source: `${BLOG_URL} (introduction, key properties)` },
} as const;

const MEGATRON_DS_README =
  "https://github.com/microsoft/Megatron-DeepSpeed/blob/main/examples_deepspeed/deepspeed4science/megatron_long_seq_support/README.md " +
  '("Performance Comparison between Old Megatron-DeepSpeed and New Megatron-DeepSpeed": 4 NVIDIA DGX A100-40GB nodes, 8 HDR InfiniBand per node; ' +
  "GPT 30B of pretrain_gpt_30B_seq_parallel.sh: TP 32 with sequence parallelism, ZeRO 0, micro-batch 1, global batch 2, --checkpoint-activations, fp16, FlashAttention-Triton)";

/**
 * The one table of Megatron-SP throughput on DGX A100 the DeepSpeed team
 * published as text: "New Megatron-DeepSpeed (TFLOPS)", GPT 30B on 32 GPUs,
 * tensor parallel 32 (sequence parallel), 2K to 256K tokens.
 */
export const MEGATRON_DS_TABLE: PublishedPoint[] = (
  [
    [2, 68],
    [4, 80],
    [8, 86],
    [16, 92],
    [32, 100],
    [64, 106],
    [128, 119],
    [256, 94],
  ] as const
).map(([k, tflops]) => ({ model: "30B", devices: 32, seqLen: k * K, system: "megatron", tflops, from: "text", source: MEGATRON_DS_README }));
