/**
 * The values and nodes a Tape records, in a module of their own so that the
 * tape (`gradients-tape.ts`) and shape inference (`gradients-shapes.ts`) both
 * read them without importing each other.
 */
import type { Attribute, ElementType } from "./builder.js";

/** A value on the tape: an identity, a static shape and an element type. */
export interface TapeValue {
  readonly id: number;
  readonly dims: readonly number[];
  readonly type: ElementType;
  /** The data of a constant (small: axes, shapes, scalars). */
  readonly constant?: readonly number[];
}

/** A recorded node. */
export interface TapeNode {
  readonly opType: string;
  readonly domain: string;
  readonly inputs: readonly (TapeValue | null)[];
  readonly outputs: readonly TapeValue[];
  readonly attributes: Readonly<Record<string, Attribute>>;
}
