import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { readDocument, resolveTextFormat, type DocumentSource } from "./documents.js";
import { JsonlSource } from "./jsonl-source.js";
import { SeparatedTextSource } from "./text-source.js";
import { TxtDirSource } from "./txt-dir-source.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "documents-"));

function write(name: string, content: string | Buffer): string {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content);
  return file;
}

/** Every document of a source, as the bytes read back through readDocument. */
function drain(source: DocumentSource): { bytes: number[]; line: number }[] {
  const out: { bytes: number[]; line: number }[] = [];
  for (let doc = source.next(); doc !== null; doc = source.next()) {
    const into = new Int32Array(doc.length);
    readDocument(source.files, doc, 0, doc.length, into, 0);
    out.push({ bytes: [...into], line: doc.ref.line });
  }
  return out;
}

/** UTF-8 bytes by Node's Buffer (an encoder other than the sources' TextEncoder). */
const utf8 = (text: string) => [...Buffer.from(text, "utf8")];

describe("JSONL documents", () => {
  const texts = ["héllo wörld", 'line\nbreak and "quotes"', "x", "emoji 🙂 and 中文", "a".repeat(40)];
  const lines = [
    JSON.stringify({ text: texts[0], id: 1 }),
    "",
    `${JSON.stringify({ meta: { a: 1 }, text: texts[1] })}\r`,
    "   ",
    JSON.stringify({ text: texts[2] }),
    JSON.stringify({ text: texts[3] }),
    JSON.stringify({ text: texts[4] }),
  ];
  const file = write("good.jsonl", `${lines.join("\n")}\n`);

  it.each([1, 2, 3, 7, 1 << 20])("reads each object's text as UTF-8 bytes with chunks of %i bytes (lines cross chunk boundaries)", (chunkBytes) => {
    const docs = drain(new JsonlSource(file, { chunkBytes }));
    expect(docs.map((d) => d.bytes)).toEqual(texts.map(utf8));
    // blank lines are passed over but counted
    expect(docs.map((d) => d.line)).toEqual([1, 3, 5, 6, 7]);
  });

  it("reads the last line without a trailing newline", () => {
    const f = write("no-newline.jsonl", `${JSON.stringify({ text: "ab" })}\n${JSON.stringify({ text: "cd" })}`);
    expect(drain(new JsonlSource(f, { chunkBytes: 4 })).map((d) => d.bytes)).toEqual([utf8("ab"), utf8("cd")]);
  });

  it("rejects bad lines naming the file and the line", () => {
    const cases: [string, RegExp][] = [
      ['{"text": "ok"}\n{"text": "broken"\n', /JSONL file '.*bad-0\.jsonl' line 2 is not valid JSON/],
      ['{"text": "ok"}\n{"body": "x"}\n', /JSONL file '.*bad-1\.jsonl' line 2 has no "text" field \(keys: "body"\)/],
      ['{"text": 5}\n', /JSONL file '.*bad-2\.jsonl' line 1: "text" must be a string, got number/],
      ['{"text": "a"}\n\n{"text": ""}\n', /JSONL file '.*bad-3\.jsonl' line 3 is an empty document/],
      ['["text"]\n', /JSONL file '.*bad-4\.jsonl' line 1 must be a JSON object with a string "text", got an array/],
    ];
    cases.forEach(([content, message], i) => {
      const f = write(`bad-${i}.jsonl`, content);
      expect(() => drain(new JsonlSource(f, { chunkBytes: 5 }))).toThrow(message);
      expect(() => drain(new JsonlSource(f, { chunkBytes: 5 }))).toThrow(/--skip-bad-documents/);
    });
    const f = write("bad-utf8.jsonl", Buffer.concat([Buffer.from('{"text": "ok"}\n{"text": "'), Buffer.from([0xc3, 0x28]), Buffer.from('"}\n')]));
    expect(() => drain(new JsonlSource(f))).toThrow(/JSONL file '.*bad-utf8\.jsonl' line 2 is not valid UTF-8/);
    const long = write("long.jsonl", `${JSON.stringify({ text: "a".repeat(100) })}\n`);
    expect(() => drain(new JsonlSource(long, { chunkBytes: 8, maxLineBytes: 50 }))).toThrow(
      /line 1 has 111 bytes, more than the longest line read \(50 bytes\)/,
    );
  });

  it("skips and counts bad lines when asked", () => {
    const f = write(
      "mixed.jsonl",
      ['{"text": "one"}', "{not json", '{"text": ""}', '{"text": 3}', '{"other": 1}', '{"text": "two"}', JSON.stringify({ text: "z".repeat(80) })].join("\n"),
    );
    const source = new JsonlSource(f, { chunkBytes: 3, skipBadDocuments: true, maxLineBytes: 60 });
    const docs = drain(source);
    expect(docs.map((d) => d.bytes)).toEqual([utf8("one"), utf8("two")]);
    expect(docs.map((d) => d.line)).toEqual([1, 6]);
    expect(source.bad.count).toBe(5);
    expect(source.bad.examples[0]).toMatch(/line 2 is not valid JSON/);
  });

  it("loads a document again from its ref and refuses refs outside the file", () => {
    const source = new JsonlSource(file, { chunkBytes: 2 });
    source.next();
    const second = source.next()!;
    const again = source.load(second.ref);
    expect([...again.bytes!]).toEqual(utf8(texts[1]!));
    expect(() => source.load({ file: 0, start: 0, end: 10_000, line: 1 })).toThrow(/has no line at bytes 0\.\.10000/);
    expect(() => source.load({ file: 0, start: 1, end: 5, line: 1 })).toThrow(/line 1 \(bytes 1\.\.5\) is no longer a document/);
  });
});

describe("text documents cut at a separator", () => {
  const body = "first doc\nstill first\n\nsecond é doc\n\n\nthird (after a stray newline)\n\nlast 🙂\n\n";
  const file = write("corpus.txt", body);
  // independent expectation: String.split, dropping the empty piece after the final separator
  const expected = body
    .split("\n\n")
    .slice(0, -1)
    .map((t) => utf8(t));

  it.each([1, 2, 3, 5, 64])("splits at \\n\\n with chunks of %i bytes (separators straddle chunks)", (chunkBytes) => {
    const docs = drain(new SeparatedTextSource(file, "\n\n", { chunkBytes }));
    expect(docs.map((d) => d.bytes)).toEqual(expected);
    expect(docs.map((d) => d.line)).toEqual([1, 2, 3, 4]);
  });

  it("splits at a multi-byte separator, keeping a last document without a separator", () => {
    const text = "alpha§§beta gamma§§δ§§ε";
    const f = write("sections.txt", text);
    for (const chunkBytes of [1, 2, 3, 4]) {
      expect(drain(new SeparatedTextSource(f, "§§", { chunkBytes })).map((d) => d.bytes)).toEqual(text.split("§§").map(utf8));
    }
  });

  it("rejects empty documents and non-UTF-8 bytes naming the file and document", () => {
    const empty = write("empty-doc.txt", "a\n\n\n\nb");
    expect(() => drain(new SeparatedTextSource(empty, "\n\n", { chunkBytes: 2 }))).toThrow(
      /text file '.*empty-doc\.txt' document 2 \(bytes 3\.\.3\) is an empty document/,
    );
    const binary = write("binary.txt", Buffer.concat([Buffer.from("good\n\nbad "), Buffer.from([0xff, 0xfe]), Buffer.from(" doc\n\nfine")]));
    expect(() => drain(new SeparatedTextSource(binary, "\n\n", { chunkBytes: 3 }))).toThrow(
      /text file '.*binary\.txt' document 2 \(bytes 6\.\.16\) is not valid UTF-8/,
    );
    // a multi-byte character cut off by the separator is not UTF-8 either
    const cut = write("cut.txt", Buffer.concat([Buffer.from("ok\n\n"), Buffer.from([0xe2, 0x82]), Buffer.from("\n\nfine")]));
    expect(() => drain(new SeparatedTextSource(cut, "\n\n", { chunkBytes: 1 }))).toThrow(/document 2 \(bytes 4\.\.6\) is not valid UTF-8/);
    const source = new SeparatedTextSource(binary, "\n\n", { skipBadDocuments: true, chunkBytes: 4 });
    expect(drain(source).map((d) => d.bytes)).toEqual([utf8("good"), utf8("fine")]);
    expect(source.bad.count).toBe(1);
    expect(() => new SeparatedTextSource(file, "")).toThrow(/separator must be a non-empty string, got ""/);
  });
});

describe("a folder of .txt documents", () => {
  const folder = path.join(dir, "folder");
  write("folder/b.txt", "bee");
  write("folder/a.txt", "ay ünïcode");
  write("folder/10.txt", "ten");
  write("folder/2.txt", "two\n\nstill two");
  write("folder/notes.md", "ignored");
  write("folder/sub/c.txt", "ignored too");

  it("reads each .txt file as one document, sorted by name", () => {
    for (const chunkBytes of [1, 3, 1024]) {
      const source = new TxtDirSource(folder, { chunkBytes });
      expect(source.files.paths.map((p) => path.basename(p))).toEqual(["10.txt", "2.txt", "a.txt", "b.txt"]);
      expect(drain(source).map((d) => d.bytes)).toEqual(["ten", "two\n\nstill two", "ay ünïcode", "bee"].map(utf8));
    }
  });

  it("names an empty or non-UTF-8 file; skips and counts them when asked", () => {
    const bad = path.join(dir, "bad-folder");
    write("bad-folder/1.txt", "fine");
    write("bad-folder/2.txt", "");
    write("bad-folder/3.txt", Buffer.from([0x61, 0x80, 0x62]));
    write("bad-folder/4.txt", "also fine");
    expect(() => drain(new TxtDirSource(bad))).toThrow(/text file '.*bad-folder\/2\.txt' is an empty document \(0 bytes\)/);
    fs.writeFileSync(path.join(bad, "2.txt"), "now fine");
    expect(() => drain(new TxtDirSource(bad, { chunkBytes: 1 }))).toThrow(/text file '.*bad-folder\/3\.txt' is not valid UTF-8/);
    fs.writeFileSync(path.join(bad, "2.txt"), "");
    const source = new TxtDirSource(bad, { skipBadDocuments: true });
    expect(drain(source).map((d) => d.bytes)).toEqual([utf8("fine"), utf8("also fine")]);
    expect(source.bad.count).toBe(2);
    write("no-txt/readme.md", "x");
    expect(() => new TxtDirSource(path.join(dir, "no-txt"))).toThrow(/text data folder '.*no-txt' holds no \.txt files/);
  });

  it("resolves auto formats and refuses a path of the wrong kind", () => {
    expect(resolveTextFormat(folder, "auto")).toBe("txt-dir");
    expect(resolveTextFormat(path.join(dir, "good.jsonl"), "auto")).toBe("jsonl");
    expect(resolveTextFormat(path.join(dir, "corpus.txt"), "auto")).toBe("text");
    expect(resolveTextFormat(path.join(dir, "corpus.txt"), "jsonl")).toBe("jsonl");
    expect(() => resolveTextFormat(path.join(dir, "missing"), "auto")).toThrow(/text data file '.*missing' cannot be read: ENOENT/);
    expect(() => new TxtDirSource(path.join(dir, "corpus.txt"))).toThrow(/txt-dir needs a folder of \.txt files, but '.*corpus\.txt' is not a folder/);
    expect(() => new JsonlSource(folder)).toThrow(/jsonl needs a regular file, but '.*folder' is a folder/);
  });
});
