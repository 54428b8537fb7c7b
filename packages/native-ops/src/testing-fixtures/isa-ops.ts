import type { SessionCache } from "@ulysses/kernels";
import { FusedOps, type CpuIsa } from "../index.js";

/** A FusedOps on `cache` for every instruction set this processor runs (the portable one always), by name. */
export function opsPerIsa(cache: SessionCache): Map<Exclude<CpuIsa, "auto">, FusedOps> {
  const isas = (["avx512", "avx2", "portable"] as const).filter((isa) => {
    try {
      new FusedOps(cache, { isa });
      return true;
    } catch (error) {
      if (/cannot run/.test((error as Error).message)) return false;
      throw error;
    }
  });
  return new Map(isas.map((isa) => [isa, new FusedOps(cache, { isa })] as const));
}
