/**
 * Packing documents into rows: each row is a window of seq + 1 token slots,
 * shifted into tokens [0, seq) and labels (the next slot's token) like
 * shiftWindows, with every token's document id and position. Next-fit,
 * in the order documents arrive: a document of at most seq + 1 tokens goes
 * whole into the current row, or, when it does not fit, starts the next row
 * and the rest of this one is padding (PAD_TOKEN, IGNORE_INDEX labels, an id
 * of its own). A longer document fills the room left in the row (if two or
 * more slots) and goes on in the next rows; the token in a row's last slot
 * (a label only) is the next row's first token, so every adjacent pair of a
 * document is trained once. `split`: each row's piece is a document of its
 * own (new id, positions from 0); `continue`: the same document (same id,
 * positions go on, so a row may start at any position).
 * Labels never cross a document: a document's last token predicts nothing.
 * Loss masks: with a `trainable` reader, each token carries a flag, and the
 * label of slot t (the token of slot t + 1) is trained only when that target
 * token's flag is 1; flags travel with their tokens through splits, continued
 * rows and the shift, so a mask means the same wherever a document lands.
 * Ids come from one counter over the stream (pieces and padding take ids
 * too); the batch's ids are that counter less the id of its first token.
 */
import type { Batch, BatchDocuments } from "@ulysses/parallel";
import { Tensor } from "@ulysses/tensors";
import { TrainingError } from "../errors.js";
import { IGNORE_INDEX } from "./batch.js";

/** The token of padding slots (byte 0); its labels are IGNORE_INDEX. */
export const PAD_TOKEN = 0;

export type LongDocuments = "split" | "continue";
export const LONG_DOCUMENTS: readonly LongDocuments[] = ["split", "continue"];

export interface PackableDocument {
  /** Tokens, at least 1. */
  readonly length: number;
}

/** Reads `count` tokens of `doc` from token `offset` into `into` at index `at`. */
export type ReadTokens<D> = (doc: D, offset: number, count: number, into: Int32Array, at: number) => void;
/** Reads the trainable flags (1: a loss target) of `count` tokens of `doc` from token `offset` into `into` at index `at`. */
export type ReadTrainable<D> = (doc: D, offset: number, count: number, into: Uint8Array, at: number) => void;

/** A document taken from the stream and not yet wholly packed. */
export interface PendingDocument<D> {
  doc: D;
  /** Its first token not yet packed as an input. */
  offset: number;
  /** Its id (the stream counter's value), given when its first token is placed; null before. */
  id: number | null;
  /** The position of token `offset`. */
  position: number;
}

export interface PackStats {
  /** Distinct documents (pieces, under split) among the batch's tokens. */
  documents: number;
  /** Padding tokens among the batch's rows x seq tokens. */
  paddingTokens: number;
  /** paddingTokens / (rows x seq). */
  padding: number;
}

export interface PackedBatch extends Batch {
  documents: BatchDocuments;
  stats: PackStats;
}

/** The [rows, seq + 1] windows a batch is packed into. */
interface Slots {
  window: Int32Array;
  ids: Float64Array;
  positions: Int32Array;
  pad: Uint8Array;
  train: Uint8Array;
}

export class DocumentPacker<D extends PackableDocument> {
  pending: PendingDocument<D> | null = null;
  /** The id the next document (or padding) gets. */
  nextId = 0;

  constructor(
    readonly longDocuments: LongDocuments,
    private readonly read: ReadTokens<D>,
    readonly padToken = PAD_TOKEN,
    /** Per-token loss flags; absent: every token of a document is a target. */
    private readonly readTrainable: ReadTrainable<D> | null = null,
  ) {
    if (!LONG_DOCUMENTS.includes(longDocuments)) throw new TrainingError(`long documents must be split or continue, got '${longDocuments}'`);
  }

  /** `rows` rows of `seq` tokens; `pull` gives the next document of the stream. */
  pack(rows: number, seq: number, pull: () => D): PackedBatch {
    if (!Number.isSafeInteger(rows) || rows < 1 || !Number.isSafeInteger(seq) || seq < 1)
      throw new TrainingError(`packing needs positive integer rows and seq, got rows ${rows}, seq ${seq}`);
    const width = seq + 1;
    // [rows, seq + 1] windows of tokens, ids, positions, padding flags, trainable flags
    const window = new Int32Array(rows * width);
    const ids = new Float64Array(rows * width);
    const positions = new Int32Array(rows * width);
    const pad = new Uint8Array(rows * width);
    const train = new Uint8Array(rows * width);
    const slots: Slots = { window, ids, positions, pad, train };
    for (let r = 0; r < rows; r++) this.fillRow(r * width, width, pull, slots);
    return this.shift(rows, seq, slots);
  }

  private fillRow(base: number, width: number, pull: () => D, slots: Slots): void {
    const { window, ids, positions, pad } = slots;
    let used = 0;
    while (used < width) {
      if (this.pending === null) {
        const doc = pull();
        if (!Number.isSafeInteger(doc.length) || doc.length < 1) throw new TrainingError(`a document to pack has ${doc.length} tokens (needs at least 1)`);
        this.pending = { doc, offset: 0, id: null, position: 0 };
      }
      const p = this.pending;
      const remaining = p.doc.length - p.offset;
      const room = width - used;
      if (remaining <= room) {
        this.place(p, remaining, base + used, slots);
        used += remaining;
        this.pending = null;
      } else if ((p.offset === 0 && p.doc.length <= width) || room < 2) {
        // a short document that does not fit, or no room for a token pair: pad, the document starts the next row
        const id = this.nextId++;
        for (let i = base + used; i < base + width; i++) {
          window[i] = this.padToken;
          ids[i] = id;
          positions[i] = i - base - used;
          pad[i] = 1;
        }
        used = width;
      } else {
        this.place(p, room, base + used, slots);
        used = width;
        // the last slot was a label only: it is the next row's first token
        p.offset += room - 1;
        if (this.longDocuments === "split") {
          p.id = null;
          p.position = 0;
        } else {
          p.position += room - 1;
        }
      }
    }
  }

  private place(p: PendingDocument<D>, count: number, at: number, slots: Slots): void {
    const { window, ids, positions, train } = slots;
    this.read(p.doc, p.offset, count, window, at);
    if (this.readTrainable === null) train.fill(1, at, at + count);
    else this.readTrainable(p.doc, p.offset, count, train, at);
    if (p.id === null) p.id = this.nextId++;
    for (let i = 0; i < count; i++) {
      ids[at + i] = p.id!;
      positions[at + i] = p.position + i;
    }
  }

  /** Windows [rows, seq + 1] -> tokens, labels, ids, positions [rows, seq]. */
  private shift(rows: number, seq: number, slots: Slots): PackedBatch {
    const { window, ids, positions, pad, train } = slots;
    const width = seq + 1;
    const tokens = new Tensor("int32", [rows, seq]);
    const labels = new Tensor("int32", [rows, seq]);
    const docIds = new Tensor("int32", [rows, seq]);
    const docPositions = new Tensor("int32", [rows, seq]);
    const first = ids[0]!;
    const seen = new Set<number>();
    let paddingTokens = 0;
    for (let r = 0; r < rows; r++) {
      for (let i = 0; i < seq; i++) {
        const w = r * width + i;
        const o = r * seq + i;
        tokens.data[o] = window[w]!;
        const sameDocument = ids[w + 1] === ids[w];
        // the target (slot w + 1) decides whether the label is trained
        labels.data[o] = pad[w] === 1 || !sameDocument || train[w + 1] !== 1 ? IGNORE_INDEX : window[w + 1]!;
        docIds.data[o] = ids[w]! - first;
        docPositions.data[o] = positions[w]!;
        if (pad[w] === 1) paddingTokens++;
        else seen.add(ids[w]!);
      }
    }
    return {
      tokens,
      labels,
      documents: { ids: docIds, positions: docPositions },
      stats: { documents: seen.size, paddingTokens, padding: paddingTokens / (rows * seq) },
    };
  }
}
