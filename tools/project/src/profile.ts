/**
 * Hardware profiles: the numbers the projection needs about a machine, read
 * from JSON and validated. A profile describes one kind of device and the
 * links between devices; it says nothing about models (see `cost-model.ts`).
 */

export class ProjectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ProjectionError";
  }
}

export interface LinkProfile {
  /** Achievable bandwidth per device in one direction, GB/s (1e9 bytes/s). */
  bandwidthGBs: number;
  /** Per-message latency, microseconds (the alpha of the alpha-beta model). */
  latencyUs: number;
}

export interface HardwareProfile {
  name: string;
  /** Where the numbers come from (datasheet, measurement, command). */
  source: string;
  /** Optional: where each field's number comes from, by field name (title, URL, the number quoted and where). */
  sources?: Record<string, string>;
  /** Devices that share the fast intra-node link. */
  devicesPerNode: number;
  /** Peak dense matrix rate per device, TFLOP/s, in the training precision. */
  peakTflops: number;
  /** Fraction of peak that large GEMMs achieve (0..1]. */
  matmulEfficiency: number;
  /** Fraction of peak that the attention kernel achieves on useful FLOPs (0..1]. */
  attentionEfficiency: number;
  /** Device memory, GiB. */
  memoryGiB: number;
  /** Bytes per activation / weight element in compute (2 for bf16, 4 for fp32). */
  bytesPerElement: number;
  intraNode: LinkProfile;
  interNode: LinkProfile;
  /**
   * Time per layer per token per hidden unit for the memory-bound ops (norms,
   * activations, residuals, RoPE, re-layouts), nanoseconds; 0 to ignore.
   */
  elementwiseNsPerTokenHidden: number;
  /** Fixed time per layer per step (kernel launches, session runs), microseconds. */
  perLayerOverheadUs: number;
  /**
   * Optional: attention efficiency measured at several sequence lengths (the
   * kernel's key length), for kernels whose efficiency varies with N (tiling
   * chosen by the key length). When present it replaces `attentionEfficiency`,
   * interpolated linearly in log2(N) and held constant beyond the ends.
   */
  attentionEfficiencyBySeq?: { seqLen: number; efficiency: number }[];
  /**
   * Optional: `elementwiseNsPerTokenHidden` measured at several token counts
   * per device and micro-step (b·N/d), for devices whose memory-bound ops slow
   * down per element as tensors outgrow the caches (a CPU core: the project's
   * machine pays about 2.5x more per token at 16K tokens than at 2K). When
   * present it replaces the single number, interpolated linearly in
   * log2(tokens) and held constant beyond the ends.
   */
  elementwiseNsByTokens?: { tokens: number; nsPerTokenHidden: number }[];
}

/** Linear interpolation in log2(x) over a table sorted by x; the end values beyond the ends. */
function interpolateLog2<T>(table: readonly T[], x: number, key: (row: T) => number, value: (row: T) => number): number {
  if (x <= key(table[0]!)) return value(table[0]!);
  for (let i = 1; i < table.length; i++) {
    const [a, b] = [table[i - 1]!, table[i]!];
    if (x <= key(b)) {
      const t = (Math.log2(x) - Math.log2(key(a))) / (Math.log2(key(b)) - Math.log2(key(a)));
      return value(a) + t * (value(b) - value(a));
    }
  }
  return value(table[table.length - 1]!);
}

/** The attention efficiency at key length `seqLen`: the table's (see `attentionEfficiencyBySeq`) or the single number. */
export function attentionEfficiencyAt(profile: HardwareProfile, seqLen: number): number {
  const table = profile.attentionEfficiencyBySeq;
  if (table === undefined || table.length === 0) return profile.attentionEfficiency;
  return interpolateLog2(
    table,
    seqLen,
    (r) => r.seqLen,
    (r) => r.efficiency,
  );
}

/** The memory-bound ops' ns per token per hidden unit at `tokens` per device: the table's (see `elementwiseNsByTokens`) or the single number. */
export function elementwiseNsAt(profile: HardwareProfile, tokens: number): number {
  const table = profile.elementwiseNsByTokens;
  if (table === undefined || table.length === 0) return profile.elementwiseNsPerTokenHidden;
  return interpolateLog2(
    table,
    tokens,
    (r) => r.tokens,
    (r) => r.nsPerTokenHidden,
  );
}

function nsTable(value: unknown, where: string): { tokens: number; nsPerTokenHidden: number }[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value))
    throw new ProjectionError(`${where}: 'elementwiseNsByTokens' must be an array of { tokens, nsPerTokenHidden }, got ${JSON.stringify(value)}`);
  const rows = value.map((row: unknown, i) => {
    const r = (typeof row === "object" && row !== null ? row : {}) as Record<string, unknown>;
    return {
      tokens: positive(`elementwiseNsByTokens[${i}].tokens`, r.tokens, where),
      nsPerTokenHidden: nonNegative(`elementwiseNsByTokens[${i}].nsPerTokenHidden`, r.nsPerTokenHidden, where),
    };
  });
  return rows.sort((a, b) => a.tokens - b.tokens);
}

function efficiencyTable(value: unknown, where: string): { seqLen: number; efficiency: number }[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value))
    throw new ProjectionError(`${where}: 'attentionEfficiencyBySeq' must be an array of { seqLen, efficiency }, got ${JSON.stringify(value)}`);
  const rows = value.map((row: unknown, i) => {
    const r = (typeof row === "object" && row !== null ? row : {}) as Record<string, unknown>;
    const seqLen = positive(`attentionEfficiencyBySeq[${i}].seqLen`, r.seqLen, where);
    const efficiency = positive(`attentionEfficiencyBySeq[${i}].efficiency`, r.efficiency, where);
    if (efficiency > 1)
      throw new ProjectionError(`${where}: 'attentionEfficiencyBySeq[${i}].efficiency' is a fraction of peak and must be <= 1, got ${efficiency}`);
    return { seqLen, efficiency };
  });
  return rows.sort((a, b) => a.seqLen - b.seqLen);
}

function positive(name: string, value: unknown, where: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new ProjectionError(`${where}: '${name}' must be a positive number, got ${JSON.stringify(value)}`);
  }
  return value;
}

function nonNegative(name: string, value: unknown, where: string): number {
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new ProjectionError(`${where}: '${name}' must be a non-negative number, got ${JSON.stringify(value)}`);
  }
  return value;
}

function link(value: unknown, name: string, where: string): LinkProfile {
  if (typeof value !== "object" || value === null) throw new ProjectionError(`${where}: '${name}' must be an object with bandwidthGBs and latencyUs`);
  const v = value as Record<string, unknown>;
  return { bandwidthGBs: positive(`${name}.bandwidthGBs`, v.bandwidthGBs, where), latencyUs: nonNegative(`${name}.latencyUs`, v.latencyUs, where) };
}

/** Validates a parsed JSON profile; `where` names its origin in errors. */
export function parseProfile(json: unknown, where = "profile"): HardwareProfile {
  if (typeof json !== "object" || json === null) throw new ProjectionError(`${where}: expected a JSON object`);
  const p = json as Record<string, unknown>;
  if (typeof p.name !== "string" || p.name === "") throw new ProjectionError(`${where}: 'name' must be a non-empty string`);
  const efficiency = (name: string) => {
    const v = positive(name, p[name], where);
    if (v > 1) throw new ProjectionError(`${where}: '${name}' is a fraction of peak and must be <= 1, got ${v}`);
    return v;
  };
  const devicesPerNode = positive("devicesPerNode", p.devicesPerNode, where);
  if (!Number.isInteger(devicesPerNode)) throw new ProjectionError(`${where}: 'devicesPerNode' must be an integer, got ${devicesPerNode}`);
  let sources: Record<string, string> | undefined;
  if (p.sources !== undefined) {
    if (typeof p.sources !== "object" || p.sources === null || Array.isArray(p.sources)) {
      throw new ProjectionError(`${where}: 'sources' must be an object of field name -> citation text, got ${JSON.stringify(p.sources)?.slice(0, 80)}`);
    }
    sources = {};
    for (const [key, value] of Object.entries(p.sources as Record<string, unknown>)) {
      if (typeof value !== "string") throw new ProjectionError(`${where}: 'sources.${key}' must be a string, got ${JSON.stringify(value)?.slice(0, 80)}`);
      sources[key] = value;
    }
  }
  return {
    name: p.name,
    source: typeof p.source === "string" ? p.source : "",
    ...(sources === undefined ? {} : { sources }),
    devicesPerNode,
    peakTflops: positive("peakTflops", p.peakTflops, where),
    matmulEfficiency: efficiency("matmulEfficiency"),
    attentionEfficiency: efficiency("attentionEfficiency"),
    memoryGiB: positive("memoryGiB", p.memoryGiB, where),
    bytesPerElement: positive("bytesPerElement", p.bytesPerElement, where),
    intraNode: link(p.intraNode, "intraNode", where),
    interNode: link(p.interNode, "interNode", where),
    elementwiseNsPerTokenHidden: nonNegative("elementwiseNsPerTokenHidden", p.elementwiseNsPerTokenHidden ?? 0, where),
    perLayerOverheadUs: nonNegative("perLayerOverheadUs", p.perLayerOverheadUs ?? 0, where),
    ...(p.attentionEfficiencyBySeq === undefined ? {} : { attentionEfficiencyBySeq: efficiencyTable(p.attentionEfficiencyBySeq, where) }),
    ...(p.elementwiseNsByTokens === undefined ? {} : { elementwiseNsByTokens: nsTable(p.elementwiseNsByTokens, where) }),
  };
}
