/**
 * Where a Gpt reads its weights: views of the parameter store, or, when the
 * store is sharded (ZeRO-3: one rank's slice), buffers it gathers into just
 * before it reads them. A block's weights go into one of two staging buffers
 * (block l's into buffer l mod 2) before its forward and again before its
 * backward unless still there (the last two layers' are); the final norm's
 * at the forward's start; the embedding for its lookup only; the head (the
 * embedding when tied) once for the loss, let go when the final norm runs
 * backward. The next layer's gather is started as a layer begins (the layer
 * after it in the forward, the one before it in the backward), into the
 * buffer whose layer is done, so it runs while the layer computes. Every
 * gather is a collective: every rank makes the same calls in the same order,
 * at points of the step every rank reaches (ParameterStore.gather runs them
 * one at a time in call order).
 */
import { blockWeightSpecs, type BlockWeights, type NormComponent, type NormTensors, type ResolvedBlockConfig } from "@ulysses/block";
import { collectGarbageNow } from "@ulysses/kernels";
import { Tensor } from "@ulysses/tensors";
import type { GptConfig } from "./gpt-config.js";
import type { ParameterStore } from "./parameters.js";

type F32 = Tensor<"float32">;

/** A gathered weight at least this large is collected as soon as it is let go, not when V8 next decides. */
const COLLECT_GATHERED_BYTES = 64 * 1024 * 1024;

export class GptWeights {
  /** The final norm's weights by suffix: views of the parameters (updated in place), or (sharded) buffers gathered at each forward's start. */
  readonly finalNorm: NormTensors;
  /** Sharded: the two staging buffers of the blocks' weights, and the gather of the layer each holds or is being filled with (null: none). */
  private readonly staging: Float32Array[] = [];
  private readonly filling: ({ layer: number; done: Promise<void> } | null)[] = [];
  /** Sharded: the head's weight gathered for this forward's loss (null: not yet, or let go). */
  private gatheredHead: Promise<F32> | null = null;
  private readonly headName: string;

  constructor(
    private readonly params: ParameterStore,
    private readonly config: GptConfig,
    norm: NormComponent,
  ) {
    const sharded = params.sharded;
    this.headName = config.tiedHead ? "embed.weight" : "head.w";
    this.finalNorm = Object.fromEntries(
      norm.weights.map(({ suffix }) => {
        const name = `norm.${suffix}`;
        if (!sharded) return [suffix, params.value(name)];
        const { spec, size } = params.slots.get(name)!;
        return [suffix, new Tensor("float32", spec.shape, new Float32Array(size))];
      }),
    );
    if (!sharded) return;
    const layerSize = config.layers === 0 ? 0 : (params.blockRange.end - params.blockRange.begin) / config.layers;
    for (let i = 0; i < Math.min(2, config.layers); i++) {
      this.staging.push(new Float32Array(layerSize));
      this.filling.push(null);
    }
  }

  /** Layer `layer`'s weights by name: views of the parameters, or (sharded) of the layer's staging buffer, at the same places as in its run of the flat vector. */
  block(layer: number, blockConfig: ResolvedBlockConfig): BlockWeights {
    const weights: BlockWeights = {};
    for (const spec of blockWeightSpecs(blockConfig)) {
      const name = `blocks.${layer}.${spec.name}`;
      if (!this.params.sharded) weights[spec.name] = this.params.value(name);
      else {
        const { offset, size } = this.params.slots.get(name)!;
        const at = offset - this.layerStart(layer);
        weights[spec.name] = new Tensor("float32", spec.shape, this.staging[layer % 2]!.subarray(at, at + size));
      }
    }
    return weights;
  }

  /** Sharded: the elements of the gathered weights held through a step (the staging buffers and the final norm's); else 0. */
  get gatheredElements(): number {
    if (!this.params.sharded) return 0;
    return this.staging.reduce((n, b) => n + b.length, 0) + Object.values(this.finalNorm).reduce((n, t) => n + t.size, 0);
  }

  /** Where layer `layer`'s weights start in the flat vector (the layers' runs are back to back, of one size). */
  private layerStart(layer: number): number {
    const { begin, end } = this.params.blockRange;
    return begin + (layer * (end - begin)) / this.config.layers;
  }

  /** Sharded: milliseconds the model has waited for gathers (what their running beside the layers did not hide). */
  get waitedMs(): number {
    return this.waited;
  }

  private waited = 0;

  /** `gathering` awaited, its wait counted in waitedMs. */
  private async wait<T>(gathering: Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await gathering;
    } finally {
      this.waited += performance.now() - started;
    }
  }

  /** Sharded: layer `layer`'s weights into its staging buffer, unless they are there or on their way (collective); resolves once they are there. */
  stageLayer(layer: number): Promise<void> {
    return this.params.sharded ? this.wait(this.fill(layer)) : Promise.resolve();
  }

  /** Starts layer `layer`'s gather into its staging buffer unless it is there or on its way; resolves once it is there. */
  private fill(layer: number): Promise<void> {
    const buffer = layer % 2;
    const current = this.filling[buffer];
    if (current?.layer === layer) return current.done;
    const done = this.params.gather(this.layerStart(layer), this.staging[buffer]!);
    this.filling[buffer] = { layer, done };
    // a failed gather leaves nothing marked; handled here, so a prefetch nobody awaits yet is no unhandled rejection (whoever awaits it gets the error)
    done.catch(() => {
      if (this.filling[buffer]?.done === done) this.filling[buffer] = null;
    });
    return done;
  }

  /**
   * Sharded: starts gathering layer `layer`'s weights (when it is a layer)
   * without waiting for them. The caller is done with the layer its buffer
   * holds (layer ± 2): the forward calls it for layer l + 1 as layer l
   * begins, the backward for layer l - 1.
   */
  prefetch(layer: number): void {
    if (this.params.sharded && layer >= 0 && layer < this.config.layers) void this.fill(layer);
  }

  /** A forward's start. Sharded: what was gathered for an earlier step is stale; the final norm's weights gathered for this one (collective). */
  async startForward(): Promise<void> {
    if (!this.params.sharded) return;
    // a forward that failed part-way may have left a gather in flight: it ends before its buffer is marked empty
    await Promise.allSettled(this.filling.map((f) => f?.done));
    this.filling.fill(null);
    this.letGoOfHead();
    for (const [suffix, tensor] of Object.entries(this.finalNorm))
      await this.wait(this.params.gather(this.params.slots.get(`norm.${suffix}`)!.offset, tensor.data));
  }

  /** The embedding table for one lookup: a view, or (sharded) gathered for it alone (collective); `collect()` after the lookup. */
  table(): Promise<F32> {
    const table = this.params.gatherParameter("embed.weight");
    return this.params.sharded ? this.wait(table) : table;
  }

  /** After a lookup: collects a large gathered table at once. */
  collect(): void {
    if (this.params.sharded && this.params.slots.get("embed.weight")!.size * 4 >= COLLECT_GATHERED_BYTES) collectGarbageNow();
  }

  /** The LM head's weight (the embedding when tied): a view, or (sharded) gathered once per forward, collective on the first call of a forward. */
  head(): Promise<F32> {
    if (!this.params.sharded) return Promise.resolve(this.params.value(this.headName));
    this.gatheredHead ??= this.params.gatherParameter(this.headName);
    return this.wait(this.gatheredHead);
  }

  /** Sharded: drops the gathered head (collected at once when large). */
  letGoOfHead(): void {
    if (this.gatheredHead === null) return;
    this.gatheredHead = null;
    if (this.params.slots.get(this.headName)!.size * 4 >= COLLECT_GATHERED_BYTES) collectGarbageNow();
  }
}
