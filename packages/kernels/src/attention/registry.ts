/**
 * The attention registry: implementation names to factories, and
 * `createAttention`, which makes a LocalAttention by name. Built in: "ort"
 * (OrtAttention, ONNX graphs on onnxruntime-node; the default) and
 * "reference" (ReferenceAttention, float64 TypeScript; slow, exact). Other
 * packages register their own on import: @ulysses/native-ops registers
 * "fused" (its native custom op), so this package never depends on it.
 */
import { KernelError } from "../errors.js";
import { ReferenceAttention } from "../reference/attention.js";
import { defaultIntraOpThreads, type SessionCache } from "../runtime/session-cache.js";
import { OrtAttention } from "./ort-attention.js";
import type { LocalAttention } from "./types.js";

/** What a factory is given. */
export interface AttentionFactoryOptions {
  /** The caller's sessions and threads, when it passed a cache; the caller releases it, never the attention. */
  cache?: SessionCache;
  /** Threads to compute with: the cache's intraOpThreads, else the caller's threads, else the default. */
  threads: number;
  /** Query rows per run, when the caller chose them (implementations without blocks ignore it). */
  blockRows?: number;
}

/** Makes one LocalAttention; throws (or rejects) when it cannot, saying why. */
export type AttentionFactory = (options: AttentionFactoryOptions) => LocalAttention | Promise<LocalAttention>;

/** A registered implementation's name; these three are the project's own ("fused" once its package is imported). */
export type AttentionImplementation = "ort" | "reference" | "fused" | (string & {});

export interface CreateAttentionOptions {
  /** A registered implementation (default "ort"). */
  implementation?: AttentionImplementation;
  /** Sessions and threads, shared with the caller's other kernels; the caller releases it. */
  cache?: SessionCache;
  /** Threads when no cache is given (default: defaultIntraOpThreads()); must equal the cache's when both are given. */
  threads?: number;
  /** Query rows per session run for "ort" (see OrtAttentionOptions). */
  blockRows?: number;
}

const FUSED_NAME = "fused";
const FUSED_PACKAGE = "@ulysses/native-ops";

const factories = new Map<string, AttentionFactory>();

/** Registers `factory` under `name`; a second registration of a name throws. */
export function registerAttention(name: string, factory: AttentionFactory): void {
  if (typeof name !== "string" || name.length === 0) throw new KernelError(`registerAttention: name must be a non-empty string, got ${String(name)}`);
  if (typeof factory !== "function") throw new KernelError(`registerAttention('${name}'): factory must be a function, got ${typeof factory}`);
  if (factories.has(name)) throw new KernelError(`registerAttention: an attention implementation named '${name}' is already registered`);
  factories.set(name, factory);
}

/** The registered implementation names, in registration order. */
export function attentionImplementations(): string[] {
  return [...factories.keys()];
}

function unknownImplementation(name: string): KernelError {
  const registered = `registered: ${attentionImplementations().join(", ")}`;
  if (name === FUSED_NAME) {
    return new KernelError(
      `attention implementation '${FUSED_NAME}' is not registered: add ${FUSED_PACKAGE} as a dependency and \`import "${FUSED_PACKAGE}"\` ` +
        `before createAttention (importing it registers '${FUSED_NAME}'); ${registered}`,
    );
  }
  return new KernelError(
    `unknown attention implementation '${name}'; ${registered} (for '${FUSED_NAME}', \`import "${FUSED_PACKAGE}"\` first: importing it registers it)`,
  );
}

function threadsOf(options: CreateAttentionOptions): number {
  const { cache, threads } = options;
  if (threads !== undefined && (!Number.isInteger(threads) || threads < 1)) {
    throw new KernelError(`createAttention: threads must be a positive integer, got ${threads}`);
  }
  if (cache !== undefined && threads !== undefined && threads !== cache.intraOpThreads) {
    throw new KernelError(`createAttention: threads (${threads}) differs from the cache's intraOpThreads (${cache.intraOpThreads}); pass one of them`);
  }
  return cache?.intraOpThreads ?? threads ?? defaultIntraOpThreads();
}

/** A LocalAttention of the named implementation ("ort" when none is named); the caller releases it. */
export async function createAttention(options: CreateAttentionOptions = {}): Promise<LocalAttention> {
  const name = options.implementation ?? "ort";
  const factory = factories.get(name);
  if (!factory) throw unknownImplementation(String(name));
  const threads = threadsOf(options);
  try {
    return await factory({ cache: options.cache, threads, blockRows: options.blockRows });
  } catch (cause) {
    if (cause instanceof KernelError) throw cause;
    throw new KernelError(`attention implementation '${name}' could not be created: ${(cause as Error).message ?? cause}`, { cause });
  }
}

registerAttention("ort", ({ cache, threads, blockRows }) => new OrtAttention({ cache, threads, blockRows }));
registerAttention("reference", () => new ReferenceAttention());
