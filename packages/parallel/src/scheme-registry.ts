/**
 * The registry of sequence-parallel schemes, by name: the four built in
 * (ulysses, allgather, ring, hybrid) and any a caller registers. Lookups
 * refuse an unknown name listing the registered ones.
 */
import { ParallelError } from "./errors.js";
import type { SequenceParallelScheme } from "./scheme.js";
import { allGatherScheme } from "./schemes/allgather.js";
import { hybridScheme } from "./schemes/hybrid.js";
import { ringScheme } from "./schemes/ring.js";
import { ulyssesScheme } from "./schemes/ulysses.js";

const schemes = new Map<string, SequenceParallelScheme>([ulyssesScheme, allGatherScheme, ringScheme, hybridScheme].map((s) => [s.name, s]));

/** Adds a scheme under its name (a name taken already is refused). */
export function registerSequenceParallelScheme(scheme: SequenceParallelScheme): void {
  if (typeof scheme.name !== "string" || !/^[a-z][a-z0-9-]*$/.test(scheme.name))
    throw new ParallelError(`a sequence-parallel scheme's name must be lower-case letters, digits and dashes, got '${String(scheme.name)}'`);
  if (schemes.has(scheme.name)) throw new ParallelError(`a sequence-parallel scheme named '${scheme.name}' is registered already`);
  schemes.set(scheme.name, scheme);
}

/** The registered scheme of that name, or undefined. */
export function findSequenceParallelScheme(name: string): SequenceParallelScheme | undefined {
  return typeof name === "string" ? schemes.get(name) : undefined;
}

/** The registered scheme of that name; a ParallelError listing the registered names otherwise. */
export function sequenceParallelScheme(name: string, label = "sequence-parallel attention"): SequenceParallelScheme {
  const scheme = findSequenceParallelScheme(name);
  if (scheme === undefined) throw new ParallelError(`${label} must be one of ${sequenceParallelSchemeNames().join(", ")}, got '${String(name)}'`);
  return scheme;
}

/** The registered names, built-ins first. */
export function sequenceParallelSchemeNames(): string[] {
  return [...schemes.keys()];
}
