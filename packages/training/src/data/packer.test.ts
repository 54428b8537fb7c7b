import { describe, expect, it } from "vitest";
import { IGNORE_INDEX, batchRows } from "./batch.js";
import { DocumentPacker, PAD_TOKEN, type LongDocuments, type PackedBatch } from "./packer.js";

interface Doc {
  length: number;
  text: string;
}

const I = IGNORE_INDEX;
const P = PAD_TOKEN;

/** A packer over in-memory documents, pulled in order and over again (epochs). */
function packer(texts: string[], mode: LongDocuments) {
  const docs: Doc[] = texts.map((text) => ({ text, length: text.length }));
  let next = 0;
  const pull = () => docs[next++ % docs.length]!;
  const p = new DocumentPacker<Doc>(mode, (doc, offset, count, into, at) => {
    for (let i = 0; i < count; i++) into[at + i] = doc.text.charCodeAt(offset + i);
  });
  return { pack: (rows: number, seq: number) => p.pack(rows, seq, pull), packer: p };
}

/** Characters -> codes; "_" is the pad token and "!" IGNORE_INDEX. */
function codes(row: string): number[] {
  return [...row].map((c) => (c === "_" ? P : c === "!" ? I : c.charCodeAt(0)));
}

function rows(t: { data: Int32Array; shape: readonly number[] }): number[][] {
  const [b, n] = t.shape as [number, number];
  return Array.from({ length: b }, (_, r) => [...t.data.subarray(r * n, (r + 1) * n)]);
}

describe("packing documents into rows (worked by hand)", () => {
  // seq 5: windows of 6 slots. A "abc", B "defg", C "hi" fit whole; D (12 tokens) is longer than a window.
  const texts = ["abc", "defg", "hi", "jklmnopqrstu"];
  const tokens = ["abc__", "defgh", "jklmn", "opqrs", "tuabc"];
  // row 0: B does not fit the 3 slots left: padding (2 tokens; the 6th slot is a label only).
  // row 2: D fills the row; its 6th slot "o" is the next row's first token. row 4: D ends, A again, B does not fit the last slot.
  const labels = ["bc!!!", "efg!i", "klmno", "pqrst", "u!bc!"];

  it("split: pieces of a long document are documents of their own, positions restart", () => {
    const batch = packer(texts, "split").pack(5, 5);
    expect(rows(batch.tokens)).toEqual(tokens.map(codes));
    expect(rows(batch.labels)).toEqual(labels.map(codes));
    // ids: A 0, padding 1, B 2, C 3, D pieces 4, 5, 6, A 7
    expect(rows(batch.documents.ids)).toEqual([
      [0, 0, 0, 1, 1],
      [2, 2, 2, 2, 3],
      [4, 4, 4, 4, 4],
      [5, 5, 5, 5, 5],
      [6, 6, 7, 7, 7],
    ]);
    expect(rows(batch.documents.positions)).toEqual([
      [0, 1, 2, 0, 1],
      [0, 1, 2, 3, 0],
      [0, 1, 2, 3, 4],
      [0, 1, 2, 3, 4],
      [0, 1, 0, 1, 2],
    ]);
    expect(batch.stats).toEqual({ documents: 7, paddingTokens: 2, padding: 2 / 25 });
  });

  it("continue: a long document keeps its id across rows and its positions go on", () => {
    const batch = packer(texts, "continue").pack(5, 5);
    expect(rows(batch.tokens)).toEqual(tokens.map(codes));
    expect(rows(batch.labels)).toEqual(labels.map(codes));
    expect(rows(batch.documents.ids)).toEqual([
      [0, 0, 0, 1, 1],
      [2, 2, 2, 2, 3],
      [4, 4, 4, 4, 4],
      [4, 4, 4, 4, 4],
      [4, 4, 5, 5, 5],
    ]);
    expect(rows(batch.documents.positions)).toEqual([
      [0, 1, 2, 0, 1],
      [0, 1, 2, 3, 0],
      [0, 1, 2, 3, 4],
      [5, 6, 7, 8, 9],
      [10, 11, 0, 1, 2],
    ]);
    expect(batch.stats).toEqual({ documents: 5, paddingTokens: 2, padding: 2 / 25 });
  });

  it("carries the document that did not fit into the next batch; ids restart at the batch's first", () => {
    const { pack } = packer(texts, "split");
    pack(5, 5);
    // B (after A at the end of the last batch) starts this one; then C, D
    const next = pack(2, 5);
    expect(rows(next.tokens)).toEqual(["defgh", "jklmn"].map(codes));
    expect(rows(next.labels)).toEqual(["efg!i", "klmno"].map(codes));
    expect(rows(next.documents.ids)).toEqual([
      [0, 0, 0, 0, 1],
      [2, 2, 2, 2, 2],
    ]);
  });

  it("starts a long document in the room a row has left, unless that is a single slot", () => {
    // seq 4: windows of 5. "ab" then the long "cdefghij": 3 slots left, the piece "cde" goes there.
    const split = packer(["ab", "cdefghij"], "split").pack(3, 4);
    expect(rows(split.tokens)).toEqual(["abcd", "efgh", "ijab"].map(codes));
    expect(rows(split.labels)).toEqual(["b!de", "fghi", "j!b!"].map(codes));
    expect(rows(split.documents.positions)).toEqual([
      [0, 1, 0, 1],
      [0, 1, 2, 3],
      [0, 1, 0, 1],
    ]);
    // "abcd" leaves one slot of 5: only padding goes there (not a token: the last slot is a label only)
    const single = packer(["abcd", "efghijk"], "continue").pack(3, 4);
    // then "abcd" does not fit the 2 slots after "ijk": padding, 1 of it a token
    expect(rows(single.tokens)).toEqual(["abcd", "efgh", "ijk_"].map(codes));
    expect(rows(single.labels)).toEqual(["bcd!", "fghi", "jk!!"].map(codes));
    expect(rows(single.documents.positions)).toEqual([
      [0, 1, 2, 3],
      [0, 1, 2, 3],
      [4, 5, 6, 0],
    ]);
    expect(single.stats.paddingTokens).toBe(1);
  });

  it("a document of exactly seq + 1 tokens fits one row whole", () => {
    const batch: PackedBatch = packer(["abcdef", "gh"], "split").pack(2, 5);
    expect(rows(batch.tokens)).toEqual(["abcde", "gh___"].map(codes));
    expect(rows(batch.labels)).toEqual(["bcdef", "h!!!!"].map(codes));
    expect(batch.stats).toEqual({ documents: 2, paddingTokens: 3, padding: 3 / 10 });
  });

  it("rejects bad sizes, modes and empty documents", () => {
    expect(() => packer(["abc"], "split").pack(0, 4)).toThrow(/positive integer rows and seq, got rows 0, seq 4/);
    expect(() => packer(["abc"], "wrap" as LongDocuments)).toThrow(/split or continue, got 'wrap'/);
    expect(() => packer([""], "split").pack(1, 4)).toThrow(/a document to pack has 0 tokens/);
  });
});

describe("a data-parallel group's rows", () => {
  it("keep their tokens, labels, ids and positions", () => {
    const batch = packer(["abc", "defg", "hi", "jklmnopqrstu"], "continue").pack(5, 5);
    const rows34 = batchRows(batch, 3, 2);
    expect(rows(rows34.tokens)).toEqual(["opqrs", "tuabc"].map(codes));
    expect(rows(rows34.labels)).toEqual(["pqrst", "u!bc!"].map(codes));
    expect(rows(rows34.documents!.ids)).toEqual([
      [4, 4, 4, 4, 4],
      [4, 4, 5, 5, 5],
    ]);
    expect(rows(rows34.documents!.positions)).toEqual([
      [5, 6, 7, 8, 9],
      [10, 11, 0, 1, 2],
    ]);
    expect(batchRows({ tokens: batch.tokens, labels: batch.labels }, 0, 1).documents).toBeUndefined();
  });
});

describe("loss flags through packing", () => {
  // A..D as above; flags: 1 on upper-case letters (the targets), worked by hand for split, seq 5.
  const texts = ["aBc", "dEFg", "hI", "jKlMnOpQrStU"];
  const flagged = () => {
    const docs = texts.map((text) => ({ text, length: text.length }));
    let next = 0;
    const p = new DocumentPacker<Doc>(
      "split",
      (doc, offset, count, into, at) => {
        for (let i = 0; i < count; i++) into[at + i] = doc.text.charCodeAt(offset + i);
      },
      PAD_TOKEN,
      (doc, offset, count, into, at) => {
        for (let i = 0; i < count; i++) into[at + i] = /[A-Z]/.test(doc.text[offset + i]!) ? 1 : 0;
      },
    );
    return () => p.pack(5, 5, () => docs[next++ % docs.length]!);
  };

  it("trains a label only when its target token is flagged, across padding, split rows and the row's last slot", () => {
    const batch = flagged()();
    expect(rows(batch.tokens)).toEqual(["aBc__", "dEFgh", "jKlMn", "OpQrS", "tUaBc"].map(codes));
    // a label is the next slot's token when that token is upper case (and of the same document)
    expect(rows(batch.labels)).toEqual(["B!!!!", "EF!!I", "K!M!O", "!Q!S!", "U!B!!"].map(codes));
  });
});
