import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { bestBlogConfiguration, blogRun, compareWithBlog, compareWithMegatronDeepSpeedTable } from "./blog-comparison.js";
import { BLOG_CHART_POINTS, BLOG_MODELS, MEGATRON_DS_TABLE } from "./blog-data.js";
import { loadProfile } from "./cli.js";
import { parameterCount, project } from "./cost-model.js";

const a100 = loadProfile(path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "profiles", "a100-40gb-nvlink-ib.json"));

describe("the DeepSpeed-Ulysses blog comparison", () => {
  it("models the runs as described: Ulysses ZeRO-3 over all GPUs, Megatron no ZeRO, both with full checkpointing, DeepSpeed's three q/k/v all-to-alls", () => {
    expect(blogRun("ulysses", 32, 8, 65536, 2)).toMatchObject({
      zeroStage: 3,
      activationCheckpointing: true,
      causal: true,
      fusedQkv: false,
      globalBatchTokens: 4 * 2 * 65536,
    });
    expect(blogRun("megatron", 64, 16, 8192, 1)).toMatchObject({ scheme: "megatron", zeroStage: 0, activationCheckpointing: true, degree: 16 });
  });

  it("the models: 7B is GPT-3 6.7B's shape, 30B the DeepSpeed scripts' 64 × 6144", () => {
    expect(parameterCount(BLOG_MODELS["7B"]) / 1e9).toBeCloseTo((12 * 32 * 4096 ** 2 + 50304 * 4096) / 1e9, 9);
    expect(parameterCount(BLOG_MODELS["30B"])).toBe(12 * 64 * 6144 ** 2 + 50304 * 6144);
  });

  it("the best configuration is the highest reported TFLOP/s among the fitting ones, found by brute force", () => {
    const model = BLOG_MODELS["7B"];
    let best = 0;
    for (const d of [1, 2, 4, 8, 16, 32]) {
      for (const b of [1, 2, 4, 8, 16, 32]) {
        const p = project(model, blogRun("ulysses", 32, d, 32768, b), a100);
        if (!p.outOfMemory) best = Math.max(best, p.reportedTflopsPerDevice);
      }
    }
    expect(bestBlogConfiguration(model, "ulysses", 32, 32768, a100)!.reportedTflopsPerDevice).toBe(best);
    expect(bestBlogConfiguration(model, "ulysses", 32, 32768, { ...a100, memoryGiB: 1 })).toBeUndefined();
  });

  it("every chart point is compared; errors are (predicted − published) / published; OOM points carry no error", () => {
    const points = compareWithBlog(a100);
    expect(points).toHaveLength(BLOG_CHART_POINTS.length);
    for (const c of points) {
      if (c.published.tflops === undefined || c.predicted === undefined || c.predicted.outOfMemory) expect(c.errorPercent).toBeUndefined();
      else expect(c.errorPercent).toBeCloseTo((100 * (c.predicted.reportedTflopsPerDevice - c.published.tflops)) / c.published.tflops, 9);
    }
    const table = compareWithMegatronDeepSpeedTable(a100);
    expect(table.map((c) => c.published.tflops)).toEqual(MEGATRON_DS_TABLE.map((p) => p.tflops));
    expect(table.every((c) => c.predicted!.run.degree === 32 && c.predicted!.run.microBatch === 1 && c.predicted!.accumulation === 2)).toBe(true);
  });
});

describe("the A100 profiles", () => {
  for (const name of ["a100-40gb-nvlink-ib.json", "a100-40gb-nvlink-ib-fa-triton.json"]) {
    it(`${name}: every input field has a citation in 'sources'`, () => {
      const hw = loadProfile(path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "profiles", name));
      const fields = ["devicesPerNode", "peakTflops", "matmulEfficiency", "attentionEfficiency", "attentionEfficiencyBySeq", "memoryGiB", "bytesPerElement"];
      fields.push(
        "intraNode.bandwidthGBs",
        "intraNode.latencyUs",
        "interNode.bandwidthGBs",
        "interNode.latencyUs",
        "elementwiseNsPerTokenHidden",
        "perLayerOverheadUs",
      );
      for (const field of fields) expect(hw.sources?.[field], field).toMatch(/^.{20,}$/s);
    });
  }
});
