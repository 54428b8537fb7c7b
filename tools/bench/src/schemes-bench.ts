/**
 * `pnpm bench:schemes` (issue 19): the sequence-parallel schemes side by side
 * on one causal TransformerBlock forward + backward per rank, P ranks on the
 * threads backend (one ONNX Runtime thread per rank by default), measured in
 * one run:
 *
 *   1. Ulysses over P ranks (kv heads replicated when P > kvHeads),
 *   2. ring, contiguous layout,
 *   3. ring, zigzag layout,
 *   4. hybrid u x r (Ulysses groups of u ranks, a ring of r = P / u groups), zigzag,
 *   5. ring zigzag and hybrid with `overlap: false`: transfers awaited before
 *      each compute, to measure what the overlap hides.
 *
 * Per row and N: the step time (median over the timed iterations of the
 * slowest rank's forward + backward, gradient all-reduce included), the
 * bytes each rank sent in the attention's collectives per step (the groups'
 * own stats summed over the SP group and the hybrid's subgroups; the
 * gradient all-reduce apart) checked against scheme-bytes.ts, and for ring
 * and hybrid rows each rank's ring compute and wait time
 * (RingAttention.stats) with the slowest / fastest compute ratio. The overlap
 * pairs give the transfer time (mean over ranks of waitMs without overlap)
 * and the fraction of it the overlap hides, two ways: (a) 1 − wait(overlap)
 * / wait(no overlap), (b) (step(no overlap) − step(overlap)) / wait(no
 * overlap). The rows' timed iterations are interleaved (iteration i of every
 * row, then i + 1), so load from other work slows every row alike.
 *
 * For a cost model, measured in the same run (every rank at once, after a
 * barrier): the local attention kernel's causal forward + backward rate per
 * rank at the ring's block size (N/P tokens, every head), the block's
 * forward GEMM rate per rank (N/P rows), and the ring's point-to-point
 * exchange (send to r + 1, receive from r − 1) time, bandwidth and latency.
 *
 * Writes bench-results/schemes/schemes.json and schemes.md. Exit status 1
 * when measured bytes differ from the formulas; the targets are
 * printed as PASS/FAIL lines and do not change the exit status.
 * `--help` lists the flags; a bad flag or value exits 2 naming it.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { launch } from "@ulysses/collectives";
import { fusedAttentionStatus } from "@ulysses/native-ops";
import { attentionFlops, medianOfSlowest } from "@ulysses/measure";
import { readCommandLine } from "./cli-flags.js";
import { describeMachine, machineInfo } from "./paper/machine-info.js";
import { blockGemmFlops } from "./paper/block-gemm.js";
import type { AttentionRateArgs, BlockShape, RankSteps, StepsArgs } from "./schemes-rank.js";
import { HELP, parseSchemeFlags, rowSpecs, type RowId } from "./schemes-flags.js";
import { allSame, mib, pct, perRankText, resultRow, sec, table, type OverlapPair, type Rates, type ResultRow } from "./schemes-results.js";

process.env.ORT_DISABLE_TELEMETRY = "1";

async function main(): Promise<void> {
  const f = readCommandLine(HELP, process.argv.slice(2), parseSchemeFlags);
  if (f.kernel === "fused") {
    const status = fusedAttentionStatus();
    if (!status.available) {
      process.stderr.write(`bench:schemes: --kernel fused: the fused attention addon is unavailable (${status.reason}); build it or pass --kernel ort\n`);
      process.exit(2);
    }
  }
  const started = performance.now();
  const machine = machineInfo();
  const date = new Date().toISOString();
  const specs = rowSpecs(f.rows, f.ranks, f.ulyssesDegree);
  const headDim = f.hidden / f.heads;
  const shape: BlockShape = { hidden: f.hidden, heads: f.heads, kvHeads: f.kvHeads, batch: f.batch };
  const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
  console.error(
    `bench:schemes: P=${f.ranks}, N ${f.seqs.join(",")}, hidden ${f.hidden}, ${f.heads} heads / ${f.kvHeads} kv heads (head dim ${headDim}), batch ${f.batch}, ` +
      `kernel ${f.kernel}, ${f.ortThreads} thread(s) per rank, ${f.warmups} warm-up + ${f.iters} timed step(s) per row`,
  );

  const world = await launch<{
    steps(args: StepsArgs): Promise<RankSteps[]>;
    attentionRate(args: AttentionRateArgs): Promise<number[]>;
    gemmRate(args: { rows: number; hidden: number; repeats: number }): Promise<number[]>;
    p2p(args: { bytes: number; iters: number; rounds: number }): Promise<number[]>;
  }>({
    worldSize: f.ranks,
    entry: new URL("./schemes-rank.ts", import.meta.url),
    ortThreadsPerRank: f.ortThreads,
    timeoutMs: 900_000,
    args: { kernel: f.kernel },
  });
  const results: ResultRow[] = [];
  let rates: Rates | null = null;
  try {
    for (const n of f.seqs) {
      const perRank = await world.all("steps", { rows: specs, seq: n, block: shape, iters: f.iters, warmups: f.warmups });
      specs.forEach((row, i) => {
        const result = resultRow(
          row,
          f,
          n,
          perRank.map((r) => r[i]!),
        );
        results.push(result);
        console.error(
          `  N=${n} ${result.label}: ${sec(result.stepSeconds)} s` +
            (result.computeSecondsPerRank === null
              ? ""
              : ` (ring compute ${perRankText(result.computeSecondsPerRank, sec)} s, wait ${perRankText(result.waitSecondsPerRank, sec)} s)`),
        );
      });
      console.error(`  (N=${n} done at ${elapsed()})`);
    }
    if (f.rates) {
      const repeats = f.rateRepeats;
      const r: Rates = { attention: [], gemm: [], p2p: [], p2pLatencySeconds: 0, p2pBandwidthBytesPerSecond: 0 };
      for (const n of f.seqs) {
        const s = Math.floor(n / f.ranks);
        const args: AttentionRateArgs = { seqQ: s, seqK: s, heads: f.heads, kvHeads: f.kvHeads, headDim, batch: f.batch, causal: true, repeats };
        const seconds = medianOfSlowest(await world.all("attentionRate", args));
        const flops = f.batch * attentionFlops({ seq: s, width: f.heads * headDim, causal: true }, "training");
        r.attention.push({
          N: n,
          seqQ: s,
          seqK: s,
          heads: f.heads,
          kvHeads: f.kvHeads,
          headDim,
          causal: true,
          flops,
          seconds,
          gflopsPerRank: flops / seconds / 1e9,
        });
        const rows = f.batch * s;
        const gemmSeconds = medianOfSlowest(await world.all("gemmRate", { rows, hidden: f.hidden, repeats: Math.max(3, repeats) }));
        const gemmFlops = blockGemmFlops(rows, f.hidden);
        r.gemm.push({ N: n, rows, hidden: f.hidden, flops: gemmFlops, seconds: gemmSeconds, gflopsPerRank: gemmFlops / gemmSeconds / 1e9 });
        console.error(
          `  rates N=${n}: attention ${(flops / seconds / 1e9).toFixed(1)} GFLOP/s per rank, GEMM ${(gemmFlops / gemmSeconds / 1e9).toFixed(1)} GFLOP/s per rank (${elapsed()})`,
        );
      }
      // the ring's k (or v) block at each N, and a latency and a large size
      const blockBytes = f.seqs.map((n) => f.batch * Math.floor(n / f.ranks) * f.kvHeads * headDim * 4);
      const sizes = [...new Set([8, 64 * 1024, 2 ** 20, ...blockBytes, 8 * 2 ** 20])].sort((a, b) => a - b);
      for (const bytes of sizes) {
        const iters = Math.max(3, Math.min(200, Math.ceil((16 * 2 ** 20) / bytes)));
        const perRank = await world.all("p2p", { bytes, iters, rounds: 3 });
        // a round lasts as long as its slowest rank; the fastest round counts (other work only slows rounds down)
        const rounds = perRank[0]!.map((_, i) => Math.max(...perRank.map((times) => times[i]!)));
        const seconds = Math.min(...rounds);
        r.p2p.push({ bytes, iters, seconds, gbPerSecondPerRank: bytes / seconds / 1e9 });
      }
      const first = r.p2p[0]!;
      const last = r.p2p[r.p2p.length - 1]!;
      r.p2pLatencySeconds = first.seconds;
      r.p2pBandwidthBytesPerSecond = (last.bytes - first.bytes) / (last.seconds - first.seconds);
      rates = r;
      console.error(`  p2p done (${elapsed()})`);
    }
  } finally {
    await world.shutdown();
  }

  const find = (id: RowId, n: number) => results.find((r) => r.id === id && r.N === n);
  const pairs: OverlapPair[] = [];
  for (const n of f.seqs) {
    for (const [on, off, scheme] of [
      ["ring-zigzag", "ring-zigzag-no-overlap", "ring"],
      ["hybrid", "hybrid-no-overlap", "hybrid"],
    ] as const) {
      const a = find(on, n);
      const b = find(off, n);
      if (a === undefined || b === undefined) continue;
      const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
      const transfer = mean(b.waitSecondsPerRank!);
      const waitOverlap = mean(a.waitSecondsPerRank!);
      pairs.push({
        scheme,
        label: a.label,
        N: n,
        stepSecondsOverlap: a.stepSeconds,
        stepSecondsNoOverlap: b.stepSeconds,
        transferSeconds: transfer,
        waitSecondsOverlap: waitOverlap,
        hiddenByWait: 1 - waitOverlap / transfer,
        hiddenByStep: (b.stepSeconds - a.stepSeconds) / transfer,
      });
    }
  }

  // targets of issue 19, measured above
  const targets: { target: string; N: number; value: string; pass: boolean | null }[] = [];
  for (const n of f.seqs) {
    const u = find("ulysses", n);
    const h = find("hybrid", n);
    targets.push(
      u !== undefined && h !== undefined
        ? {
            target: `hybrid ${h.u}x${h.r} sends fewer bytes per rank than ${u.label}`,
            N: n,
            value: `${mib(Math.max(...h.bytesPerRank))} MiB < ${mib(Math.max(...u.bytesPerRank))} MiB`,
            pass: Math.max(...h.bytesPerRank) < Math.max(...u.bytesPerRank),
          }
        : { target: "hybrid sends fewer bytes per rank than Ulysses with replication", N: n, value: "rows not measured", pass: null },
    );
    const z = find("ring-zigzag", n);
    targets.push(
      z?.computeRatio != null
        ? { target: "ring zigzag slowest / fastest rank compute time <= 1.15", N: n, value: z.computeRatio.toFixed(2), pass: z.computeRatio <= 1.15 }
        : { target: "ring zigzag slowest / fastest rank compute time <= 1.15", N: n, value: "row not measured", pass: null },
    );
    const c = find("ring-contiguous", n);
    targets.push(
      c?.computeRatio != null
        ? { target: "ring contiguous slowest / fastest rank compute time >= 1.8", N: n, value: c.computeRatio.toFixed(2), pass: c.computeRatio >= 1.8 }
        : { target: "ring contiguous slowest / fastest rank compute time >= 1.8", N: n, value: "row not measured", pass: null },
    );
    const ring = pairs.find((p) => p.scheme === "ring" && p.N === n);
    for (const [way, pick] of [
      ["(a) 1 - wait(overlap)/wait(no overlap)", (p: OverlapPair) => p.hiddenByWait],
      ["(b) (step(no overlap) - step(overlap))/wait(no overlap)", (p: OverlapPair) => p.hiddenByStep],
    ] as const) {
      targets.push(
        ring !== undefined
          ? { target: `overlap hides >= 50% of the ring's transfer time, ${way}`, N: n, value: pct(pick(ring)), pass: pick(ring) >= 0.5 }
          : { target: `overlap hides >= 50% of the ring's transfer time, ${way}`, N: n, value: "rows not measured", pass: null },
      );
    }
  }

  machine.loadAfter = (await import("node:os")).loadavg();
  const heading = `Sequence-parallel schemes: one causal TransformerBlock forward+backward, P=${f.ranks} ranks (threads backend, ${f.ortThreads} kernel thread(s) per rank), hidden ${f.hidden}, ${f.heads} heads, ${f.kvHeads} kv heads, head dim ${headDim}, batch ${f.batch}, attention kernel ${f.kernel}`;
  const stepTable = table(
    [
      "row",
      "N",
      "step s",
      "attn MiB/rank",
      "formula MiB/rank",
      "bytes",
      "ring compute s per rank",
      "ring wait s per rank",
      "compute max/min",
      "work max/min",
      "grad MiB/rank",
    ],
    results.map((r) => [
      r.label,
      String(r.N),
      sec(r.stepSeconds),
      allSame(r.bytesPerRank) ? mib(r.bytesPerRank[0]!) : r.bytesPerRank.map(mib).join("/"),
      allSame(r.expectedBytesPerRank) ? mib(r.expectedBytesPerRank[0]!) : r.expectedBytesPerRank.map(mib).join("/"),
      r.bytesMatch ? "OK" : "MISMATCH",
      perRankText(r.computeSecondsPerRank, sec),
      perRankText(r.waitSecondsPerRank, sec),
      r.computeRatio === null ? "-" : r.computeRatio.toFixed(2),
      r.workRatio === null ? "-" : r.workRatio.toFixed(2),
      mib(r.gradBytesPerRank[0]!),
    ]),
  );
  const overlapTable = table(
    ["pair", "N", "step s (overlap)", "step s (no overlap)", "transfer s (wait, no overlap)", "wait s (overlap)", "hidden (a)", "hidden (b)"],
    pairs.map((p) => [
      p.label,
      String(p.N),
      sec(p.stepSecondsOverlap),
      sec(p.stepSecondsNoOverlap),
      sec(p.transferSeconds),
      sec(p.waitSecondsOverlap),
      pct(p.hiddenByWait),
      pct(p.hiddenByStep),
    ]),
  );
  const targetLines = targets.map((t) => `${t.pass === null ? "SKIP" : t.pass ? "PASS" : "FAIL"}  N=${t.N}  ${t.target}: ${t.value}`);
  const rateTables =
    rates === null
      ? []
      : [
          table(
            ["kernel", "N", "shape", "GFLOP/s per rank", "s per call"],
            [
              ...rates.attention.map((a) => [
                `attention ${f.kernel} causal fwd+bwd`,
                String(a.N),
                `[${f.batch}, ${a.seqQ}, ${a.heads}/${a.kvHeads}, ${a.headDim}]`,
                a.gflopsPerRank.toFixed(1),
                a.seconds.toFixed(3),
              ]),
              ...rates.gemm.map((g) => [`block forward GEMMs`, String(g.N), `${g.rows} rows x ${g.hidden}`, g.gflopsPerRank.toFixed(1), g.seconds.toFixed(3)]),
            ],
          ),
          table(
            ["p2p message", "exchanges per round", "ms per exchange", "GB/s per rank"],
            rates.p2p.map((p) => [
              p.bytes < 1024 ? `${p.bytes} B` : `${(p.bytes / 1024).toFixed(0)} KiB`,
              String(p.iters),
              (p.seconds * 1000).toFixed(3),
              p.gbPerSecondPerRank.toFixed(2),
            ]),
          ),
          `p2p latency ${(rates.p2pLatencySeconds * 1e6).toFixed(0)} us, bandwidth ${(rates.p2pBandwidthBytesPerSecond / 1e9).toFixed(2)} GB/s per rank (slope between ${first8(rates)} and the largest message)`,
        ];
  const notes = [
    "step = median over the timed iterations of the slowest rank's forward + backward (gradient all-reduce included); attn MiB = bytes each rank sent in the attention's collectives per step, summed over the SP group and the hybrid's Ulysses and ring groups (the gradient all-reduce apart, grad MiB); formula = scheme-bytes.ts.",
    "ring compute / wait = RingAttention.stats per rank (rank order) in the median iteration: wall time inside local kernel calls / awaiting k, v (dk, dv) transfers; with more ranks than cores it includes time a rank's kernel thread waits for a core. work max/min = the layout's own imbalance (causal pairs x heads per rank's ring).",
    "hidden (a) = 1 - mean wait(overlap) / mean wait(no overlap); hidden (b) = (step(no overlap) - step(overlap)) / mean wait(no overlap).",
    `cost-model rates: every rank at once after a barrier (${f.ranks} ranks sharing ${machine.cores} cores); attention at the ring's block size N/P, GEMMs = the block's forward GEMMs (24 rows h^2 FLOPs) on N/P rows; p2p = every rank sends one message to r+1 and receives one from r-1 (the ring's round), fastest of 3 rounds.`,
  ];
  const output = [
    "",
    heading,
    `machine: ${describeMachine(machine)}`,
    "",
    stepTable,
    "",
    "Overlap of the ring's transfers with its compute",
    overlapTable,
    "",
    ...rateTables.flatMap((t) => [t, ""]),
    ...notes,
    "",
    "Targets (issue 19), measured in this run:",
    ...targetLines,
  ].join("\n");
  console.log(output);

  const mismatched = results.filter((r) => !r.bytesMatch);
  for (const r of mismatched)
    console.log(`BYTES DIFFER from the formula: ${r.label} N=${r.N}: [${r.bytesPerRank.join(", ")}] != [${r.expectedBytesPerRank.join(", ")}]`);

  const outDir = fileURLToPath(new URL("../../../bench-results/schemes/", import.meta.url));
  mkdirSync(outDir, { recursive: true });
  const totalSeconds = (performance.now() - started) / 1000;
  writeFileSync(
    `${outDir}schemes.json`,
    `${JSON.stringify(
      {
        bench: "schemes",
        machine: {
          cpuModel: machine.cpuModel,
          cores: machine.cores,
          memoryGiB: machine.memoryGiB,
          date,
          node: machine.node,
          onnxruntime: machine.onnxruntime,
          loadBefore: machine.loadBefore,
          loadAfter: machine.loadAfter,
        },
        flags: f,
        totalSeconds,
        rows: results,
        overlap: pairs,
        rates,
        targets,
      },
      null,
      2,
    )}\n`,
  );
  const md = [
    "# bench:schemes",
    "",
    `${heading}.`,
    "",
    `Machine: ${describeMachine(machine)}. Date ${date}. Run time ${totalSeconds.toFixed(0)} s.`,
    "",
    stepTable,
    "",
    "## Overlap of the ring's transfers with its compute",
    "",
    overlapTable,
    "",
    ...(rateTables.length > 0 ? ["## Cost-model rates", "", ...rateTables.flatMap((t) => [t, ""])] : []),
    "## Notes",
    "",
    ...notes.map((n) => `- ${n}`),
    "",
    "## Targets (issue 19)",
    "",
    ...targetLines.map((l) => `- ${l}`),
    "",
  ].join("\n");
  writeFileSync(`${outDir}schemes.md`, md);
  console.log(`\nwrote ${outDir}schemes.json and schemes.md (${totalSeconds.toFixed(0)} s)`);
  if (mismatched.length > 0) process.exitCode = 1;
}

function first8(r: Rates): string {
  const b = r.p2p[0]!.bytes;
  return b < 1024 ? `${b} B` : `${(b / 1024).toFixed(0)} KiB`;
}

await main();
