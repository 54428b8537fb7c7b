/**
 * The text task's data settings: the loader options a run's flags mean
 * (--data, --data-format, --doc-separator, --long-documents,
 * --skip-bad-documents), their checks before any rank starts (errors name the
 * flag and the value, or the file and line of a bad document), and the
 * data's size and SHA-256 recorded in checkpoints (corpusDigest).
 */
import fs from "node:fs";
import {
  ByteTextData,
  DocumentData,
  LONG_DOCUMENTS,
  DATA_FORMATS,
  LOSS_ON,
  readsDocuments,
  resolveTextFormat,
  errnoText,
  type DocumentDataOptions,
  fileKind,
} from "@ulysses/training";
import { DEFAULTS, type TrainConfig } from "./config.js";
import { tokenizerOf, usesHfModel } from "./hf-model.js";
import { TrainerError } from "./errors.js";

/** --doc-separator as typed: \n, \r, \t and \\ stand for a newline, a carriage return, a tab and a backslash. */
export function unescapeSeparator(text: string): string {
  return text.replace(/\\([nrt\\])/g, (_, c: string) => ({ n: "\n", r: "\r", t: "\t", "\\": "\\" })[c]!);
}

/** The text loader's options for this run (--data, --data-format, --doc-separator, --long-documents, --skip-bad-documents). */
export function textDataOptions(config: TrainConfig): DocumentDataOptions {
  if (config.data === null) throw new TrainerError("textDataOptions: the run has no --data");
  return {
    path: config.data,
    format: config.dataFormat,
    separator: config.docSeparator === null ? null : unescapeSeparator(config.docSeparator),
    longDocuments: config.longDocuments,
    skipBadDocuments: config.skipBadDocuments,
    // a Hugging Face model's tokenizer turns documents (and chat) into its tokens; the loss on the assistant's only for chat
    ...(usesHfModel(config) ? { tokenizer: tokenizerOf(config) } : {}),
    ...(config.dataFormat === "chat" ? { lossOn: config.lossOn } : {}),
  };
}

/** Whether the run packs documents (text task: JSONL, a .txt folder, or text with --doc-separator); plain text without one is one stream (ByteTextData). */
export function usesDocuments(config: TrainConfig): boolean {
  return config.task === "text" && config.data !== null && readsDocuments({ path: config.data, format: config.dataFormat, separator: config.docSeparator });
}

/** The document flags' own values, and the flags that only a text run with documents reads. */
export function documentFlagProblems(config: TrainConfig): string[] {
  const problems: string[] = [];
  if (!DATA_FORMATS.includes(config.dataFormat)) problems.push(`--data-format must be ${DATA_FORMATS.join(", ")}, got '${config.dataFormat}'`);
  else if (config.dataFormat === "chat" && !usesHfModel(config))
    problems.push("--data-format chat needs a model with a tokenizer and a chat template (--model DIR, or --model-config FILE --tokenizer DIR)");
  if (!LOSS_ON.includes(config.lossOn)) problems.push(`--loss-on must be ${LOSS_ON.join(" or ")}, got '${String(config.lossOn)}'`);
  else if (config.lossOn !== DEFAULTS.lossOn && config.dataFormat !== "chat")
    problems.push(`--loss-on ${config.lossOn} is for chat data (--data-format chat); other documents train on every token`);
  if (!LONG_DOCUMENTS.includes(config.longDocuments)) problems.push(`--long-documents must be ${LONG_DOCUMENTS.join(" or ")}, got '${config.longDocuments}'`);
  if (config.docSeparator !== null && (typeof config.docSeparator !== "string" || config.docSeparator === ""))
    problems.push(`--doc-separator must be a non-empty string, got ${JSON.stringify(config.docSeparator)}`);
  if (typeof config.skipBadDocuments !== "boolean") problems.push(`--skip-bad-documents is a switch, got ${String(config.skipBadDocuments)}`);
  if (config.task === "recall") {
    const given = [
      config.dataFormat !== "auto" ? `--data-format ${config.dataFormat}` : null,
      config.docSeparator !== null ? `--doc-separator ${JSON.stringify(config.docSeparator)}` : null,
      config.longDocuments !== "split" ? `--long-documents ${config.longDocuments}` : null,
      config.skipBadDocuments === true ? "--skip-bad-documents" : null,
    ].filter((flag) => flag !== null);
    if (given.length > 0) problems.push(`${given.join(", ")}: for --task text with --data; the recall task reads no data`);
  }
  return problems;
}

/** The text data checked as the ranks will read it (documents: the first 64 MiB of the corpus; plain text: its size). */
export function textDataProblems(config: TrainConfig): string[] {
  const data = config.data!;
  if (documentFlagProblems(config).length > 0) return [];
  let stat: fs.Stats;
  try {
    stat = fs.statSync(data);
  } catch (cause) {
    return [`--data '${data}': ${errnoText(cause)}`];
  }
  if (!stat.isFile() && !stat.isDirectory()) return [`--data '${data}' is ${fileKind(stat)}: give a regular file or a folder of .txt files`];
  let format: string;
  try {
    format = resolveTextFormat(data, config.dataFormat);
  } catch (error) {
    return [(error as Error).message]; // it names the path
  }
  if (format !== "text" && config.docSeparator !== null)
    return [
      `--doc-separator ${JSON.stringify(config.docSeparator)} is for plain text, but --data '${data}' is read as ${format} (--data-format ${config.dataFormat})`,
    ];
  if (!usesDocuments(config) && usesHfModel(config))
    return [
      `--data '${data}' is read as one stream of bytes, but a Hugging Face model trains on its tokenizer's documents: give --doc-separator, a .jsonl file, a folder of .txt files or --data-format chat`,
    ];
  if (!usesDocuments(config)) {
    const stream = `--data '${data}' is read as one stream of text (give --doc-separator to cut it into documents, or use a .jsonl file or a folder of .txt files)`;
    const problems: string[] = [];
    if (config.longDocuments !== "split") problems.push(`--long-documents ${config.longDocuments} is for documents, but ${stream}`);
    if (config.skipBadDocuments) problems.push(`--skip-bad-documents is for documents, but ${stream}`);
    try {
      ByteTextData.check(data, config.seq);
    } catch (error) {
      problems.push((error as Error).message);
    }
    return problems;
  }
  try {
    DocumentData.check(textDataOptions(config));
    return [];
  } catch (error) {
    return [`--data '${data}' (${format}): ${(error as Error).message}`];
  }
}
