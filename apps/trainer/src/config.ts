/**
 * The run configuration: every setting of the CLI and of a `--config
 * file.json` (same names, camelCase or kebab-case) with its default and help
 * (SETTINGS), the values a configuration implies (its model, tiles, parallel
 * options, recall task) and what a checkpoint records of it. Parsing argv is
 * args.ts's job, validation validate.ts's, planning plan.ts's, running run.ts's.
 */
import { blockConfigOf, type GptConfig } from "@ulysses/model";
import { hfModelOf } from "./hf-model.js";
import type { ParallelDimsOptions, SequenceLayoutKind, SequenceParallelKind } from "@ulysses/parallel";
import { corpusDigest, recallMinVocab, BYTE_VOCAB, type LongDocuments, type RecallTaskOptions, type TextFormatOption } from "@ulysses/training";

/** How a setting's text is read besides its default's type: a number or null, a number or auto, on / off / auto. */
type SettingKind = "number?" | "tile" | "switch-auto";

interface Setting<T> {
  default: T;
  /** Its --help text. */
  help: string;
  kind?: SettingKind;
}

function setting<T>(value: T, help: string, kind?: SettingKind): Setting<T> {
  return kind === undefined ? { default: value, help } : { default: value, help, kind };
}

/**
 * Every setting of a run, in --help's order: its default, its help text and
 * how its text is read (args.ts). TrainConfig is their values; flags are the
 * kebab-case names, config-file keys either form.
 */
export const SETTINGS = {
  sp: setting(2, "sequence-parallel degree: ranks sharing one sequence"),
  dp: setting(1, "data-parallel degree: SP groups training on different batches"),
  backend: setting<string>("threads", "collectives backend: threads | local (all ranks in one thread) | mpi (run under mpirun) | path to a backend module"),
  task: setting<"recall" | "text">(
    "recall",
    "recall (built-in synthetic long-range key-value recall: facts in the first quarter of each sequence, queries in the last) | text (needs --data)",
  ),
  data: setting<string | null>(
    null,
    "text data for byte-level language modelling (implies --task text): a file, or a folder of .txt files (see Text data below)",
  ),
  dataFormat: setting<TextFormatOption>(
    "auto",
    'auto (a folder: txt-dir, *.jsonl: jsonl, else text) | text | jsonl | txt-dir | chat (JSONL of {"messages": [{"role", "content"}]}, rendered with the tokenizer\'s chat template; needs --model or --model-config)',
  ),
  docSeparator: setting<string | null>(
    null,
    "plain text: the string between documents, e.g. '\\n\\n' (\\n \\r \\t \\\\ are escapes); without it a text file is one stream",
  ),
  longDocuments: setting<LongDocuments>(
    "split",
    "documents longer than --seq + 1 tokens: split (each row's piece is its own document) | continue (one document across rows)",
  ),
  skipBadDocuments: setting(
    false,
    'skip bad documents (invalid JSON, no string "text", empty, not UTF-8) and count them, instead of failing with the file and line',
  ),
  model: setting<string | null>(
    null,
    "a Hugging Face model directory to fine-tune (config.json; model.safetensors or model.safetensors.index.json and its shards; tokenizer.json): families llama (Llama 2/3/3.1/3.2, SmolLM, Mistral), qwen2, qwen3. Implies --task text with the model's tokenizer; the model's shape comes from config.json (--layers, --hidden, --heads, --kv-heads, --mlp, --mlp-ratio, --tied-head are refused)",
  ),
  modelConfig: setting<string | null>(
    null,
    "a Hugging Face config.json: train a model of that shape from random weights (seeded by --seed) with the tokenizer of --tokenizer",
  ),
  tokenizer: setting<string | null>(null, "a directory with tokenizer.json and tokenizer_config.json (default: --model's own)"),
  lossOn: setting<"assistant" | "all">("assistant", 'chat data ({"messages": [...]} lines): train on the assistant\'s tokens only, or on all tokens'),
  seq: setting(2048, "global sequence length in tokens"),
  layers: setting(2, "transformer blocks"),
  hidden: setting(128, "model width"),
  heads: setting(4, "attention heads"),
  kvHeads: setting(4, "key/value heads (grouped-query attention when fewer than --heads)"),
  mlp: setting<"gelu" | "swiglu">("gelu", "gelu | swiglu"),
  mlpRatio: setting(4, "MLP width as a multiple of --hidden"),
  tiedHead: setting(true, "tie the LM head to the token embedding"),
  attention: setting<SequenceParallelKind>(
    "ulysses",
    "ulysses (all-to-all over heads) | ring (K and V passed around the ranks: any SP degree, past the head count) | hybrid (Ulysses in groups of --ulysses-degree ranks, ring across them) | allgather (all-gather K and V, the baseline); see 'Which scheme' in the README",
  ),
  ulyssesDegree: setting<number | null>(
    null,
    "hybrid attention: ranks per Ulysses group, u (default --sp / --ring-degree, or gcd(--sp, --kv-heads))",
    "number?",
  ),
  ringDegree: setting<number | null>(null, "hybrid attention: Ulysses groups around the ring, r = --sp / u", "number?"),
  sequenceLayout: setting<"auto" | SequenceLayoutKind>(
    "auto",
    "auto (zigzag when a ring runs, which balances causal attention over the ranks; else contiguous) | contiguous | zigzag",
  ),
  ulyssesHeadGroups: setting(
    1,
    "Ulysses: pipeline its all-to-alls against the attention kernel over this many head groups (1: off; slower on a CPU, where the exchange copies use the same cores)",
  ),
  batch: setting(1, "sequences per step per data-parallel group"),
  steps: setting(400, "training steps (total, including resumed ones; 0: none, the model as built or imported is checkpointed and exported)"),
  lr: setting(3e-3, "peak learning rate"),
  minLr: setting(3e-4, "learning rate at the end of the cosine decay (at most --lr)"),
  warmup: setting(20, "linear warmup steps"),
  weightDecay: setting(0.01, "AdamW decoupled weight decay (matrices only; from 0 to 1)"),
  gradClip: setting(1, "clip the global gradient norm to this (0: off)"),
  seed: setting(1234, "seed for weights and data"),
  keys: setting(8, "recall task: keys per sequence's table (each a group of --values answer tokens)"),
  values: setting(8, "recall task: values a key may hold (without the other shard's facts the best accuracy is 1 / values)"),
  vocab: setting<number | null>(
    null,
    "recall task: vocabulary size; the tokens past the answers and queries are fillers (default keys x (values + 1) + 1)",
    "number?",
  ),
  out: setting<string | null>(
    null,
    "run directory (default runs/<timestamp>, linked as runs/latest; with --resume: the resumed run's directory); an existing run or non-empty directory is refused without --overwrite",
  ),
  resume: setting<string | null>(
    null,
    "checkpoint file or run directory to continue from, writing into that directory (or --out). The model shape (--hidden, --layers, --heads, --kv-heads, --mlp, --mlp-ratio, --tied-head, --attention, recall --vocab) comes from the checkpoint: leave those flags out or give the same values; other settings default to the checkpoint's recorded ones; --backend, --data and --out are never taken from a checkpoint",
  ),
  overwrite: setting(false, "let --out name an existing run or a non-empty directory (replaces the run's files there)"),
  timeout: setting(
    300,
    "seconds a rank waits for a peer's collective, or for a stuck peer to finish a step, before the run fails naming that rank (from 1 to 2147483)",
  ),
  skipMemoryCheck: setting(
    false,
    "skip the memory preflight (by default a run whose estimated peak memory exceeds the cgroup limit or the free memory is refused before any rank starts)",
  ),
  checkpointEvery: setting(100, "steps between checkpoints (0: only at the end)"),
  activationCheckpointing: setting(false, "recompute block activations in backward to save memory (only each block's input is kept)"),
  tileMlp: setting<TileSetting>(
    "auto",
    "tiled MLP: run each block's MLP over tiles of this many tokens in forward and backward, so its 4x-wide activations exist for one tile only (0: off; auto, the default: tiles of at most 8 MiB, only where a rank's untiled MLP buffer is larger; the run header names the rows)",
    "tile",
  ),
  tileLoss: setting<TileSetting>(
    "auto",
    "tiled loss: run the LM head, softmax and cross-entropy over tiles of this many tokens, so [tokens, vocab] logits never exist (0: off; auto, the default: tiles of at most 4 MiB of logits but at least 256 rows, only where a rank's untiled logits are larger; the run header names the rows)",
    "tile",
  ),
  tileAttention: setting<TileSetting>(
    1,
    "attention in head groups: each block's q, k, v projections, attention and output projection run over this many groups of heads in forward and backward (recomputed per group), so their buffers exist for heads/groups heads at a time; must divide --heads and --kv-heads (1: off; auto: the most groups the layout allows, e.g. 8 heads: 8 at SP 1, 4 at SP 2 with Ulysses; the run header names the groups)",
    "tile",
  ),
  keepAttentionOutputs: setting(
    false,
    "with attention in head groups (--tile-attention) and without --activation-checkpointing: each block keeps its groups' attention outputs and log-sum-exps in float32 (heads x head dim + heads floats per token per layer, also under --precision bf16), so that backward makes only the groups' q, k, v projections again and runs no attention forward (the same results, bit for bit); ulysses attention without --ulysses-head-groups",
  ),
  memoryArena: setting<MemoryArenaSetting>(
    "auto",
    "auto (the default): ONNX Runtime's CPU arenas and glibc's heap, unless the memory account says the run would then not fit, as --no-memory-arena; --memory-arena: always; --no-memory-arena: arenas off, freed large buffers back to the OS and V8 collecting freed tensors after every 16 MiB of op outputs per rank (the least memory; several times slower for small models here, where every large buffer is fresh pages); the run header names the choice; =auto in a config file: \"auto\", true or false",
    "switch-auto",
  ),
  zero: setting<number>(
    0,
    "ZeRO stage over the ranks that hold the weights: 0 (each rank holds and updates everything) | 1 (AdamW moments sharded) | 2 (gradients too: each block's reduce-scattered as the backward makes it) | 3 (weights too: each rank holds its slice and gathers each layer's weights just before the layer runs, forward and backward); the losses and weights are the same at every stage",
  ),
  sharedWeights: setting(
    false,
    "threads and local backends: one copy of the weights per process that every rank reads, each rank updating its ZeRO slice in place (needs --zero 1 or 2; --zero 3 shards the weights instead)",
  ),
  precision: setting<"fp32" | "bf16">(
    "fp32",
    "fp32 | bf16: ZeRO-2's and ZeRO-3's gradient slices stored in bf16 (half their memory; each summed part rounded to nearest even as it is added) and what the blocks keep for backward in bf16 where that is all they keep: with --activation-checkpointing each block's input, with attention in head groups and a tiled MLP each block's input and MLP input (the backward recomputes from them); under --zero 3 the weights also travel in bf16 when gathered (half the gathers' bytes; the fp32 slice stays the master); needs --zero 2 or 3 over more than one rank; AdamW's master weights and moments and all arithmetic stay fp32",
  ),
  logEvery: setting(10, "steps between log lines when not on a terminal"),
  profile: setting(
    false,
    "time every op world rank 0 calls (linear products, norms, attention forward and backward, loss tiles, AdamW, ...): each step's calls and milliseconds per op in metrics.jsonl (ops), the last step's table in the summary; not recorded in checkpoints",
  ),
  export: setting(true, "export model.onnx at the end (--no-export to skip)"),
  saveDtype: setting<"auto" | "bf16" | "fp16" | "fp32">(
    "auto",
    "dtype of hf/model.safetensors: bf16 | fp16 | fp32 | auto (a Hugging Face model's torch_dtype, fp32 for the built-in GPT); bf16 and fp16 round to nearest even",
  ),
  threads: setting<number | null>(null, "ONNX Runtime threads per rank, at most 4 x the machine's cores (default max(1, floor(cores / ranks)))", "number?"),
  kernel: setting<"auto" | "fused" | "ort">(
    "auto",
    "local attention kernel: fused (the C++ ONNX Runtime custom op of @ulysses/native-ops, the faster one in pnpm bench:kernels) | ort (ONNX graphs) | auto (fused when its native addon is built, else ort; the run header names the one used)",
  ),
};

export type TrainConfig = { [K in keyof typeof SETTINGS]: (typeof SETTINGS)[K]["default"] };

export const DEFAULTS = Object.fromEntries(Object.entries(SETTINGS).map(([key, s]) => [key, s.default])) as TrainConfig;

/** How `key`'s text is read besides its default's type (undefined: as the default's type). */
export function settingKind(key: keyof TrainConfig): SettingKind | undefined {
  return (SETTINGS[key] as Setting<unknown>).kind;
}

export const BACKENDS = ["threads", "local", "mpi"] as const;

/** --timeout bounds, in seconds: below a second a busy step is taken for a hang; above, Node's timers overflow (2^31 - 1 ms). */
export const MIN_TIMEOUT_S = 1;
export const MAX_TIMEOUT_S = 2_147_483;

/** --weight-decay's largest value (lr x decay is the fraction of each matrix a step removes). */
export const MAX_WEIGHT_DECAY = 1;

/** --threads' largest value per core of the machine: past it ONNX Runtime spends its time starting threads. */
export const MAX_THREADS_PER_CORE = 4;

/** Tokens of a rank's shard in one step (batch x its longest share of seq). */
export function tokensPerRankOf(config: Pick<TrainConfig, "batch" | "seq" | "sp">): number {
  return config.batch * Math.ceil(config.seq / config.sp);
}

/**
 * --memory-arena: true keeps ONNX Runtime's per-session CPU arenas and
 * glibc's dynamic heap (fast: freed buffers are reused without new page
 * faults); false turns the arenas off and fixes glibc's mmap threshold, so
 * freed large buffers go back to the OS (the least memory, slower: every
 * large buffer is new pages); auto picks true unless the run's memory
 * account with arenas would not fit (resolveMemoryArena in preflight.ts).
 */
export type MemoryArenaSetting = boolean | "auto";

/** --tile-mlp / --tile-loss: rows per tile, 0 for off, or auto. */
export type TileSetting = number | "auto";

/** The widest buffer one auto-sized loss tile may hold: [rows, vocab] fp32. */
export const AUTO_TILE_BYTES = 4 * 1024 * 1024;

/**
 * The widest buffer one auto-sized MLP tile may hold: [rows, MLP width] fp32.
 * Twice the loss's: at hidden 256 that is 2048 rows, so SP 2 at N = 4096
 * runs its MLP untiled, 2-3% faster a step than in two 1024-row tiles (2-core
 * VM, side by side), while the tile, not the sequence, still bounds it.
 */
export const AUTO_MLP_TILE_BYTES = 8 * 1024 * 1024;

/**
 * The fewest rows of an auto-sized loss tile, whatever the vocabulary: the
 * head's products over a tile ([rows, hidden] x [hidden, vocab] and back)
 * read the whole [vocab, hidden] embedding and write its gradient once per
 * tile, so short tiles are bound by memory traffic. At Qwen3's vocabulary
 * (151,936, hidden 1024) 256-row tiles ran the head and loss in 0.74-0.84
 * of 64-row tiles' time (pnpm bench:head, Intel Xeon VM, one thread), for
 * 148 MiB of logits per rank instead of 37.
 */
export const AUTO_LOSS_TILE_MIN_ROWS = 256;

/**
 * Rows per tile of the MLP and of the LM head + loss (0: untiled), as each
 * rank runs them. A number is taken as given. auto tiles only where the
 * untiled buffer of a rank's shard (tokensPerRankOf rows) would be wider than
 * AUTO_MLP_TILE_BYTES (MLP) or AUTO_TILE_BYTES (loss): then the rows that fit
 * in it, a multiple of 64, at least 64 (MLP) or AUTO_LOSS_TILE_MIN_ROWS
 * (loss). So a 32K vocabulary gets 256-row loss tiles, the byte vocabulary
 * 4096-row ones past 4096 tokens per rank, hidden 256 2048-row MLP tiles
 * past 2048, while a small vocabulary or a short shard stays untiled.
 */
export function tileRowsOf(config: TrainConfig): { mlp: number; loss: number } {
  const rowsPerRank = tokensPerRankOf(config);
  const auto = (width: number, bytes: number, fewest: number): number => {
    const rows = Math.max(fewest, Math.floor(bytes / (4 * width) / 64) * 64);
    return rows >= rowsPerRank ? 0 : rows;
  };
  return {
    mlp: config.tileMlp === "auto" ? auto(blockConfigOf(gptConfigOf(config)).mlpHidden, AUTO_MLP_TILE_BYTES, 64) : config.tileMlp,
    loss: config.tileLoss === "auto" ? auto(vocabOf(config), AUTO_TILE_BYTES, AUTO_LOSS_TILE_MIN_ROWS) : config.tileLoss,
  };
}

/** The GPT config a training configuration builds (a resumed run uses its checkpoint's instead). */
export function gptConfigOf(config: TrainConfig): GptConfig {
  const hf = hfModelOf(config);
  if (hf !== null) return hf.model;
  return {
    vocab: vocabOf(config),
    hidden: config.hidden,
    heads: config.heads,
    kvHeads: config.kvHeads,
    layers: config.layers,
    mlp: config.mlp,
    mlpRatio: config.mlpRatio,
    maxSeq: config.seq,
    tiedHead: config.tiedHead,
  };
}

/** The parallel layout a configuration asks for (ParallelDims' options). */
export function parallelOptionsOf(config: TrainConfig): ParallelDimsOptions {
  const options: ParallelDimsOptions = { sp: config.sp, dp: config.dp, attention: config.attention };
  if (config.ulyssesDegree !== null) options.ulyssesDegree = config.ulyssesDegree;
  if (config.ringDegree !== null) options.ringDegree = config.ringDegree;
  if (config.sequenceLayout !== "auto") options.layout = config.sequenceLayout;
  if (config.ulyssesHeadGroups !== 1) options.pipelineChunks = config.ulyssesHeadGroups;
  return options;
}

/** The vocabulary the task implies: a Hugging Face model's; bytes for text; for recall --vocab, or the smallest that holds --keys x --values. */
export function vocabOf(config: TrainConfig): number {
  const hf = hfModelOf(config);
  if (hf !== null) return hf.model.vocab;
  if (config.task === "text") return BYTE_VOCAB;
  return config.vocab ?? recallMinVocab(config.keys, config.values);
}

/** The stream of the data RNG (seeded with --seed): every rank draws the same global batches from it. */
export const DATA_STREAM = 1_000_003;

/** The recall task's options of a configuration. */
export function recallOptionsOf(config: TrainConfig): RecallTaskOptions {
  return { seq: config.seq, keys: config.keys, values: config.values, vocab: vocabOf(config) };
}

/**
 * Settings a checkpoint may never supply: code (the backend module) and paths
 * (what the run reads and where it writes), the switches that lift a
 * safety check (--overwrite, --skip-memory-check), and --profile, a diagnostic
 * of one invocation. Resume takes them from the command line only;
 * saveCheckpoint never records them.
 */
export const NEVER_FROM_CHECKPOINT = [
  "backend",
  "data",
  "model",
  "modelConfig",
  "tokenizer",
  "out",
  "resume",
  "overwrite",
  "skipMemoryCheck",
  "profile",
] as const satisfies readonly (keyof TrainConfig)[];

/** The flags that fix the model's shape (a resumed run takes them from the checkpoint's GPT config); --attention is how it is parallelised, a run setting. */
export const MODEL_SHAPE_KEYS = ["hidden", "layers", "heads", "kvHeads", "mlp", "mlpRatio", "tiedHead"] as const satisfies readonly (keyof TrainConfig)[];

export { textDataOptions, unescapeSeparator, usesDocuments } from "./data-config.js";

/**
 * What a checkpoint records of the run: every setting as plain data except
 * code and paths (NEVER_FROM_CHECKPOINT); for the text task the data file's
 * size and SHA-256 instead of its name (resume checks the --data given then
 * against them and says when they differ).
 */
export function checkpointSettings(config: TrainConfig): Record<string, string | number | boolean | null> {
  const record: Record<string, string | number | boolean | null> = {};
  for (const [key, value] of Object.entries(config)) {
    if (!(NEVER_FROM_CHECKPOINT as readonly string[]).includes(key)) record[key] = value as string | number | boolean | null;
  }
  // a Hugging Face model's family: resume asks for its --model again (a checkpoint records no path)
  const hf = hfModelOf(config);
  if (hf !== null) record.modelFamily = hf.family.name;
  if (config.task === "text" && config.data !== null) {
    const { bytes, sha256 } = corpusDigest(config.data);
    record.dataBytes = bytes;
    record.dataSha256 = sha256;
  }
  return record;
}

/** True when `backend` is a module path rather than a registered name. */
export function isModulePath(backend: string): boolean {
  return backend.startsWith(".") || backend.startsWith("/") || /\.(m?js|ts)$/.test(backend);
}

/** camelCase -> kebab-case (flag names). */
export function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** kebab-case -> camelCase (config keys). */
export function camel(key: string): string {
  return key.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}
