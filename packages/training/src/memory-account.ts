/**
 * The memory account of a training run: its estimated peak resident memory
 * on one machine, term by term, from the run's plan (model, scheme and
 * degrees, tiles, tokens per rank) and where its ranks live. The trainer's
 * preflight holds it against the memory available, and `pnpm bench:memory`
 * prints it next to the measured peak of every row (docs/results/memory).
 * The model reports its weights and gradients (parameterMemory), the scheme
 * its per-token terms (layerFloatsPerToken), training its AdamW moments.
 *
 * The account counts, for every rank on this machine (all of them for the
 * threads and local backends, each its own process under mpirun on one
 * host), what is alive at the peak, the backward of the last block:
 *
 * - a measured baseline: the process (Node, the loader, ONNX Runtime and its
 *   first sessions) and, on the threads backend, each rank's worker thread;
 * - weights (one copy per process with shared weights; under ZeRO-3 each
 *   rank's slice and what it gathers), the gradients each rank holds at its
 *   ZeRO stage and one layer's (ZeRO 2 and 3's gradients outside the blocks,
 *   and ZeRO-3's gathered head, only in the loss phase below), AdamW moments
 *   m and v (rankStateFloats: sharded under ZeRO 1 to 3; a checkpoint
 *   streams the slices, gathering nothing);
 * - saved activations, per token and layer (TransformerBlock's savedBytes):
 *   the block input, norm1's output and statistics, the attention's q, k, v,
 *   out and log-sum-exp in the local kernel's layout (and the output in the
 *   rank's own layout when an exchange moved it), x2, and, unless the MLP is
 *   tiled, norm2's output and statistics and the MLP's up (and gate) and
 *   activation. Activation checkpointing keeps only each block's input, and
 *   the block in backward holds its recomputed attention half; attention in
 *   head groups (--tile-attention) keeps nothing of the attention half, and
 *   its backward holds norm1's output, dx2, dh1 and one group's tensors;
 * - the backward working set, the larger of its two phases, which never
 *   overlap: the loss and the final norm's backward (ZeRO-2's gradients
 *   outside the blocks, held until the blocks run backward; one loss tile's logits,
 *   softmax and dLogits and the head weight gradient [hidden, vocab] each
 *   tile makes, two of them, the previous one freed but not yet collected;
 *   or, untiled, logits, softmax and dLogits [tokens, vocab]; and the final
 *   norm's input, output and gradient), then one block's backward (the
 *   gradients alive together, the MLP's unless tiled, then the attention's,
 *   and the largest ONNX Runtime op's temporaries; a tiled MLP's one tile:
 *   its recomputed up, activation and their gradients);
 * - the exchange scratch (send and receive areas, the gathered gradients)
 *   when sequence parallelism moves tensors: at most EXCHANGE_CHUNK_BYTES
 *   each for Ulysses and hybrid (their all-to-alls run in chunks), except
 *   Ulysses pipelined in chunks of heads (--ulysses-head-groups), whose
 *   concurrent exchanges are whole;
 * - the local kernel's score tiles (bounded per call);
 * - ZeRO-1's summed gradient slice, made at the optimizer step beside each
 *   rank's whole gradient while the arenas still hold what the backward freed.
 *
 * Without arenas (`memoryArena: false`), ONNX Runtime's CPU arenas are off
 * (session-cache.ts) and glibc returns freed large buffers
 * (setMallocMmapThreshold), so nothing else grows with the sequence; with
 * arenas a measured slack on
 * the per-token terms counts what the arenas and glibc's heap keep. The
 * account is meant to be within 15% of the measured peak.
 */
import { normComponent } from "@ulysses/block";
import { ARENA_HEAP_GROWING_PERCENT, COLLECT_GARBAGE_EVERY_BYTES } from "@ulysses/kernels";
import { blockConfigOf, headGradientColumns, headGroupTileRowsOf, parameterMemory, storesBfloat16, validateGptConfig, type GptConfig } from "@ulysses/model";
import { EXCHANGE_CHUNK_BYTES, layerFloatsPerToken, sequenceParallelScheme } from "@ulysses/parallel";
import { evenSplitSizes } from "@ulysses/tensors";
import { adamwMomentBytes, rankStateFloats } from "./memory-terms.js";

const MiB = 1024 * 1024;
const F32 = 4;

// Measured constants: how each was measured is in docs/results/memory/calibration.md.
/** One process with its first rank's sessions, and each worker thread of the threads backend. */
export const PROCESS_BASELINE_BYTES = 140 * MiB;
export const WORKER_BASELINE_BYTES = 72 * MiB;
/** With --memory-arena: what the arenas and glibc's heap keep per byte of the per-token terms (ONNX graphs; native ops). */
export const ARENA_SLACK = 1.5;
export const NATIVE_OPS_ARENA_SLACK = 0.3;
/** With --memory-arena: what the arenas keep per rank whatever the sequence length (ONNX graphs; native ops). */
export const ARENA_FLOOR_BYTES = 64 * MiB;
export const NATIVE_OPS_ARENA_FLOOR_BYTES = 30 * MiB;
/** With --memory-arena: freed tensors waiting longer for V8's full collection, per rank. */
export const V8_DEFERRED_BYTES = 40 * MiB;
/** Score tiles and kernel scratch of one rank's local attention (forward scores are capped at 8 MiB per run). */
export const ATTENTION_SCRATCH_BYTES = 16 * MiB;

export interface MemoryTerm {
  name: string;
  bytes: number;
}

export interface MemoryEstimate {
  /** Sum of the terms. */
  bytes: number;
  terms: MemoryTerm[];
  /** Ranks whose memory is counted (those on this machine). */
  ranks: number;
  /** Tokens each rank holds per step (batch x its shard of the sequence). */
  tokensPerRank: number;
}

/** What the account reads of a run: its plan's resolved values, the memory settings, and where the ranks live. */
export interface TrainingMemoryInput {
  model: GptConfig;
  /** The sequence-parallel scheme's registered name and its degrees (u x r = sp). */
  scheme: string;
  sp: number;
  ulyssesDegree: number;
  ringDegree: number;
  /** Ulysses' exchanges pipelined in this many chunks of heads (1: off). */
  pipelineChunks: number;
  /** Rows per tile of each block's MLP and of the LM head and loss (0: untiled), and the attention's head groups (1: off). */
  tiles: { mlp: number; loss: number; attentionHeadGroups: number };
  /** Tokens each rank holds per step (batch x its shard of the sequence). */
  tokensPerRank: number;
  activationCheckpointing: boolean;
  /** Data-parallel degree: the gradient group is sp x dp ranks. */
  dp: number;
  /** The ZeRO stage (0 to 3). */
  zero: number;
  /** One copy of the weights per process, read by all of its ranks (--shared-weights). */
  sharedWeights: boolean;
  /** Bytes per element of ZeRO-2's slice gradients (4: float32, 2: bfloat16); default 4. */
  sliceGradientBytes?: 2 | 4;
  /** What the blocks keep is kept in bf16 (GptOptions.bfloat16Checkpoints: checkpointing's inputs, or head groups' inputs and MLP inputs with a tiled MLP); default false. */
  bfloat16Checkpoints?: boolean;
  /** Head groups keep their attention outputs for backward (GptOptions.keepAttentionOutputs; float32); default false. */
  keepAttentionOutputs?: boolean;
  /** ZeRO-3: bytes per element the weights travel in when gathered (2: a bf16 copy of each rank's slice and a message's scratch beside it); default 4. */
  weightGatherBytes?: 2 | 4;
  /** ONNX Runtime's arenas and glibc's heap kept (their measured slack is counted) or freed memory returned to the OS. */
  memoryArena: boolean;
  /** FusedOps' native elementwise kernels run (a smaller arena slack). */
  nativeOps: boolean;
  /** Ranks whose memory lands on this machine, and the processes and worker threads they live in. */
  placement: { ranks: number; processes: number; workers: number };
}

/** The memory account of a training run on one machine: its estimated peak resident memory, broken down. */
export function estimateTrainingMemory(input: TrainingMemoryInput): MemoryEstimate {
  const { model, tiles, tokensPerRank, activationCheckpointing, zero, sharedWeights, memoryArena, nativeOps } = input;
  validateGptConfig(model);
  const { ranks, processes, workers } = input.placement;
  const replica = parameterMemory(model);
  const params = replica.parameters;
  // the ranks on this machine: their held gradients at the stage (the world's first `ranks`: under mpirun on several hosts the largest slices)
  const groupSize = input.sp * input.dp;
  const edgeParameters = params - replica.blockParameters;
  const gathered = {
    layer: replica.layerParameters,
    layers: model.layers,
    finalNorm: normComponent(blockConfigOf(model).norm).weights.length * model.hidden,
    head: model.vocab * model.hidden,
  };
  const stateOf = (rank: number) => rankStateFloats({ parameters: params, edgeParameters, groupSize, rank, zero, gathered });
  let heldGradientFloats = 0;
  let weightFloats = 0;
  // the weights the ranks on this machine hold between steps (ZeRO-3: their slices)
  let sliceFloats = 0;
  for (let rank = 0; rank < ranks; rank++) {
    const state = stateOf(rank);
    heldGradientFloats += state.gradients;
    weightFloats += state.weights + state.gatheredWeights;
    sliceFloats += state.weights;
  }
  // ZeRO 2 and 3: the gradients outside the blocks, held by each rank through the loss (the same on every rank); ZeRO-3 the gathered head
  const lossPhaseGradientFloats = stateOf(0).lossPhaseGradients;
  const lossPhaseWeightFloats = stateOf(0).lossPhaseWeights;
  const lossPhaseHeld = lossPhaseGradientFloats + lossPhaseWeightFloats;
  const streamed = zero >= 2 && groupSize > 1;
  const sharded = zero === 3 && groupSize > 1;
  const bf16Travel = sharded && input.weightGatherBytes === 2;
  const block = blockConfigOf(model);
  const tiledMlp = tiles.mlp > 0;
  const tiledLoss = tiles.loss > 0;
  const headGroups = tiles.attentionHeadGroups;
  const keepOutputs = input.keepAttentionOutputs === true && headGroups > 1 && !activationCheckpointing;
  const perLayer = layerFloatsPerToken(model, input.sp, input.scheme, input.ulyssesDegree, tiledMlp, headGroups, keepOutputs);
  // kept in bf16 (checkpointing's inputs; head groups with a tiled MLP: the inputs and the MLP's inputs, all their blocks keep):
  // the layers' count half (two bytes an element), but the block in backward's is made again in float32
  const bf16Kept = input.bfloat16Checkpoints === true && storesBfloat16({ activationCheckpointing, attentionHeadGroups: headGroups, mlpTileRows: tiles.mlp });
  const keptLayers = bf16Kept ? (model.layers - 1) / 2 + 1 : model.layers;
  // the head groups' kept outputs stay float32 in every layer
  const activationFloats = activationCheckpointing
    ? keptLayers * model.hidden + perLayer.recomputed
    : keptLayers * perLayer.saved + model.layers * perLayer.keptOutputs;
  const mlpTileRows = tiledMlp ? Math.min(tiles.mlp, tokensPerRank) : 0;
  const lossTileRows = tiledLoss ? Math.min(tiles.loss, tokensPerRank) : 0;
  // one row tile of a head group's [rows, hidden] term (x2's in forward, dh1's in backward)
  const groupTileFloats = headGroups > 1 ? model.hidden * Math.min(tokensPerRank, headGroupTileRowsOf(model.hidden)) : 0;
  const finalNormFloats = 3 * model.hidden + 2; // the final norm's input, output and gradient
  // Ulysses (unpipelined) and hybrid exchange in chunks: a send and a receive area of at most EXCHANGE_CHUNK_BYTES
  const chunkedExchange = sequenceParallelScheme(input.scheme).memory({
    sp: input.sp,
    kvHeads: block.kvHeads,
    headDim: block.headDim,
    degrees: input,
    pipelineChunks: input.pipelineChunks,
  }).chunked;
  const exchangeBytes = F32 * perLayer.exchange * tokensPerRank;
  const all = (bytesPerRank: number) => bytesPerRank * ranks;
  // The backward's two phases never overlap (GPT.backward drops the final norm's input and gradient before the blocks run backward):
  // first the loss, tile by tile, and the final norm's backward with the final norm's input, output and gradient alive; then the
  // blocks, one at a time, where a tiled MLP's backward (one tile) comes before the attention's gradients exist.
  // Each tile's head weight gradient is made a block of vocabulary columns at a time (headGradientColumns): a new
  // [hidden, columns] tensor from a copy of dLogits' columns [tile rows, columns] (no copy when one block is the whole
  // vocabulary), added into the flat gradient and dropped. With --no-memory-arena the garbage collector runs before an op
  // whose outputs would reach its budget (willAllocate), so the previous block's is gone before a budget-sized one is made
  // (smaller ones are in the freed-tensors term); otherwise V8 decides and the previous one may still be there.
  // With the fused kernel (FusedOps: linearWeightGradientInto) the head's gradient is added in place, with no block at all: the
  // term then over-counts by the blocks (5 MiB per rank at hidden 256, vocab 32768, 64-row tiles), which the account keeps.
  const headGradients = memoryArena ? 2 : 1;
  const headColumns = tiledLoss ? headGradientColumns(model.hidden, model.vocab, lossTileRows) : model.vocab;
  const headBlockFloats = headColumns === model.vocab ? model.hidden * model.vocab : (model.hidden + lossTileRows) * headColumns;
  const headBlock = headColumns === model.vocab ? "[hidden, vocab]" : `[hidden, ${headColumns} of vocab ${model.vocab}] and its dLogits columns`;
  // With native ops the cross-entropy writes dLogits over the logits (crossEntropyInPlace): one [tile, vocab] buffer, not two
  const tileLogits = nativeOps ? 1 : 2;
  const heldEdge =
    (lossPhaseGradientFloats > 0 ? `, the ${lossPhaseGradientFloats} gradients outside the blocks (ZeRO-${zero})` : "") +
    (lossPhaseWeightFloats > 0 ? `, the head's ${lossPhaseWeightFloats} weights gathered (ZeRO-3)` : "");
  const lossPhase = tiledLoss
    ? {
        name: `one loss tile: ${nativeOps ? "logits, overwritten by their gradient," : "logits and dLogits"} of ${lossTileRows} tokens x vocab ${model.vocab}, ${headGradients === 1 ? "one block of a tile's head weight gradient" : "two blocks of a tile's head weight gradient"} ${headBlock}, the final norm's input, output and gradient${heldEdge}`,
        bytes: F32 * (tileLogits * model.vocab * lossTileRows + headGradients * headBlockFloats + finalNormFloats * tokensPerRank + lossPhaseHeld),
      }
    : {
        name: `logits, softmax and their gradient [tokens, vocab ${model.vocab}], the final norm's input, output and gradient${heldEdge}`,
        bytes: F32 * ((3 * model.vocab + finalNormFloats) * tokensPerRank + lossPhaseHeld),
      };
  const blockPhase = {
    name: tiledMlp
      ? `the larger of the attention's gradients${headGroups > 1 ? ` in ${headGroups} head groups` : ""} and one MLP tile of ${mlpTileRows} tokens`
      : "its gradients and the largest op's temporaries",
    bytes: F32 * Math.max(perLayer.backward * tokensPerRank + groupTileFloats, perLayer.mlpTile * mlpTileRows),
  };
  const terms: MemoryTerm[] = [
    {
      name: `runtime baseline (${processes} process${processes > 1 ? "es" : ""}${workers > 0 ? `, ${workers} worker thread${workers > 1 ? "s" : ""}` : ""}: Node, ONNX Runtime sessions)`,
      bytes: processes * PROCESS_BASELINE_BYTES + workers * WORKER_BASELINE_BYTES,
    },
    sharedWeights
      ? { name: `weights (${params} fp32 parameters, one copy per process shared by its ranks)`, bytes: processes * replica.weightBytes }
      : sharded
        ? {
            name: `weights (ZeRO-3: each rank's slice of ${params} fp32 parameters${bf16Travel ? " and its bf16 copy, gathered in bf16" : ""}, two gathered layers of ${gathered.layer} and the final norm's ${gathered.finalNorm}; the head's in the loss phase)`,
            bytes: F32 * weightFloats + (bf16Travel ? 2 * sliceFloats + all(EXCHANGE_CHUNK_BYTES) : 0),
          }
        : { name: `weights (${params} fp32 parameters x ${ranks} rank replicas)`, bytes: all(replica.weightBytes) },
    {
      name: streamed
        ? `gradients (ZeRO-${zero}: each rank's slice${input.sliceGradientBytes === 2 ? " in bf16" : ""}, one layer's and the exchange scratch; the ${edgeParameters} outside the blocks are in the loss phase)`
        : "gradients (flat vector and one layer's)",
      bytes:
        (streamed ? (input.sliceGradientBytes ?? F32) : F32) * heldGradientFloats + all(F32 * replica.layerParameters + (streamed ? EXCHANGE_CHUNK_BYTES : 0)),
    },
    {
      name: zero > 0 ? `AdamW moments (ZeRO-${zero}: 1/${groupSize} per rank)` : "AdamW moments m, v (per rank)",
      bytes: adamwMomentBytes(params, ranks, zero > 0),
    },
    {
      name: activationCheckpointing
        ? `saved activations (checkpointing: ${model.layers} layer inputs${input.bfloat16Checkpoints === true ? " in bf16" : ""} + ${headGroups > 1 ? "norm1's output" : "one recomputed attention half"}, ${tokensPerRank} tokens per rank)`
        : `saved activations (${model.layers} layers x ${perLayer.saved} ${bf16Kept ? "values per token in bf16" : "floats per token"}${tiledMlp ? ", MLP tiled" : ""}${headGroups > 1 ? ", attention in head groups" : ""}${keepOutputs ? ` and their outputs, ${perLayer.keptOutputs} floats per token in float32` : ""}, ${tokensPerRank} tokens per rank)`,
      bytes: all(F32 * activationFloats * tokensPerRank),
    },
    {
      name: `backward working set, the larger of its two phases: the loss and the final norm's backward (${lossPhase.name}) or one block's backward (${blockPhase.name})`,
      bytes: all(Math.max(lossPhase.bytes, blockPhase.bytes)),
    },
    {
      name: `attention working buffers (score tiles; head dim ${block.headDim})`,
      bytes: all(ATTENTION_SCRATCH_BYTES),
    },
    {
      name: `sequence-parallel exchange scratch (send and receive areas${headGroups > 1 ? ", one head group's" : ""}${chunkedExchange ? `, in chunks of at most ${EXCHANGE_CHUNK_BYTES / MiB} MiB` : ""})`,
      // chunks are sized on the whole tensors (seqAllToAll's chunkCount); the travelling share of one fills the areas
      bytes: all(chunkedExchange ? Math.min(exchangeBytes, 2 * EXCHANGE_CHUNK_BYTES * perLayer.travels) : exchangeBytes),
    },
  ];
  if (!memoryArena) {
    terms.push({
      name: `freed tensors awaiting V8's collection (at most ${COLLECT_GARBAGE_EVERY_BYTES / MiB} MiB of op outputs per rank, --no-memory-arena)`,
      bytes: all(COLLECT_GARBAGE_EVERY_BYTES),
    });
  } else {
    // the terms after the baseline, weights, gradients and moments, less the fixed attention scratch and the share of the
    // working set that is ZeRO-2's held gradients and ZeRO-3's gathered head (plain buffers made once a step, not op outputs)
    const edgeShare = Math.max(lossPhase.bytes, blockPhase.bytes) - Math.max(lossPhase.bytes - F32 * lossPhaseHeld, blockPhase.bytes);
    const perToken = terms.slice(4).reduce((n, t) => n + t.bytes, 0) - all(ATTENTION_SCRATCH_BYTES) - all(edgeShare);
    const slack = nativeOps ? NATIVE_OPS_ARENA_SLACK : ARENA_SLACK;
    const floor = nativeOps ? NATIVE_OPS_ARENA_FLOOR_BYTES : ARENA_FLOOR_BYTES;
    terms.push({
      name: `ONNX Runtime arenas and glibc-retained buffers (--memory-arena${nativeOps ? ", LayerNorm, rope and GELU native" : ""}: ${slack}x the per-token terms and ${floor / MiB} MiB per rank, measured)`,
      bytes: slack * perToken + all(floor),
    });
    terms.push({
      name: `freed tensors awaiting V8's full collection (--memory-arena: V8's heap grows ${1 + ARENA_HEAP_GROWING_PERCENT / 100}x between them, ${V8_DEFERRED_BYTES / MiB} MiB per rank, measured)`,
      bytes: all(V8_DEFERRED_BYTES),
    });
  }
  if (zero === 1 && groupSize > 1) {
    // the reduce-scatter's result, made after the backward: the whole gradient is still held, and what the backward freed is
    // either still in the arenas or back with the OS (then the working set above over-counts by more than this)
    const sliceFloats = evenSplitSizes(params, groupSize)
      .slice(0, ranks)
      .reduce((a, b) => a + b, 0);
    terms.push({ name: "ZeRO-1's summed gradient slice at the optimizer step (each rank's, beside its whole gradient)", bytes: F32 * sliceFloats });
  }
  return { bytes: terms.reduce((n, t) => n + t.bytes, 0), terms, ranks, tokensPerRank };
}
