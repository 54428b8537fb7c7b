/**
 * Chooses a LocalAttention implementation by name:
 * - "ort": OrtAttention (ONNX graphs on onnxruntime-node; the default),
 * - "reference": ReferenceAttention (float64 TypeScript; slow, exact),
 * - "custom": FusedAttention from @ulysses/fused-attention (a fused native
 *   ONNX Runtime custom op), loaded on demand so this package does not depend
 *   on it. Building and wiring that package is left to it and its users.
 */
import { KernelError } from "../errors.js";
import { ReferenceAttention } from "../reference/attention.js";
import { SessionCache } from "../runtime/session-cache.js";
import { OrtAttention } from "./ort-attention.js";
import type { LocalAttention } from "./types.js";

export type AttentionImplementation = "ort" | "reference" | "custom";

export const ATTENTION_IMPLEMENTATIONS: readonly AttentionImplementation[] = ["ort", "reference", "custom"];

export interface CreateAttentionOptions {
  implementation?: AttentionImplementation;
  /** Sessions and threads for "ort"; "custom" takes its thread count from it. */
  cache?: SessionCache;
  /** Threads for "custom" when no cache is given (default: a SessionCache's default). */
  threads?: number;
  /** Query rows per session run for "ort" (see OrtAttentionOptions). */
  blockRows?: number;
  /**
   * Loads @ulysses/fused-attention; required for "custom". Pass `() => import("@ulysses/fused-attention")`
   * from a package that depends on it: module resolution then starts from the
   * caller, and this package keeps no dependency on the native one (which
   * itself tests against this package).
   */
  load?: () => Promise<unknown>;
}

const FUSED_PACKAGE = "@ulysses/fused-attention";

interface FusedModule {
  FusedAttention: new (options: { threads?: number }) => LocalAttention;
}

async function loadFused(threads: number, load?: () => Promise<unknown>): Promise<LocalAttention> {
  // This package does not depend on the fused one, so only the caller can resolve it.
  if (load === undefined) {
    throw new KernelError(
      `attention implementation 'custom' needs \`load: () => import("${FUSED_PACKAGE}")\` from a package that depends on ${FUSED_PACKAGE}; or choose implementation 'ort'.`,
    );
  }
  let module: Partial<FusedModule>;
  try {
    module = (await load()) as Partial<FusedModule>;
  } catch (cause) {
    throw new KernelError(
      `attention implementation 'custom' needs ${FUSED_PACKAGE}, which could not be loaded (${(cause as Error).message ?? cause}). ` +
        `Install it (\`npm install ${FUSED_PACKAGE}\`: its install script builds the addon, \`npm rebuild ${FUSED_PACKAGE}\` reruns it; ` +
        `inside the ulysses-ts repository \`npx pnpm@12.4.2 --filter ${FUSED_PACKAGE} build:native\`; C++ toolchain and the ONNX Runtime C API headers, see its README), ` +
        `make it a dependency of the package that calls createAttention and pass \`load: () => import("${FUSED_PACKAGE}")\`; or choose implementation 'ort'.`,
      { cause },
    );
  }
  if (typeof module.FusedAttention !== "function") {
    throw new KernelError(`${FUSED_PACKAGE} loaded but exports no FusedAttention class (exports: ${Object.keys(module).join(", ") || "none"})`);
  }
  return new module.FusedAttention({ threads });
}

/** A LocalAttention of the chosen implementation ("ort" when none is named). */
export async function createAttention(options: CreateAttentionOptions = {}): Promise<LocalAttention> {
  const implementation = options.implementation ?? "ort";
  switch (implementation) {
    case "ort":
      return new OrtAttention({ cache: options.cache, blockRows: options.blockRows });
    case "reference":
      return new ReferenceAttention();
    case "custom":
      return loadFused(options.cache?.intraOpThreads ?? options.threads ?? new SessionCache().intraOpThreads, options.load);
    default:
      throw new KernelError(`unknown attention implementation '${String(implementation)}'; use one of ${ATTENTION_IMPLEMENTATIONS.join(", ")}`);
  }
}
