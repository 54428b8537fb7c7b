/**
 * What a training data loader asks of a tokenizer: a document's text as token
 * ids (with the BOS/EOS rule of the tokenizer), and a chat conversation
 * rendered with the tokenizer's chat template as token ids with a flag per
 * token saying whether it is a loss target (an assistant message's tokens).
 * HfTokenizer implements it; the loaders of @ulysses/training take any object
 * that does.
 */

/** One message of a conversation: {"role": "user", "content": "..."}. */
export interface ChatMessage {
  readonly role: string;
  readonly content: string;
}

/** A document's tokens; `trainable[i]` is 1 where token i is a loss target (absent: every token is). */
export interface TokenizedDocument {
  ids: Int32Array;
  trainable?: Uint8Array;
}

export interface DocumentTokenizer {
  /** One more than the largest id it produces. */
  readonly vocabSize: number;
  /** The id padding slots hold (their labels are never trained), or null (the loader then uses 0). */
  readonly pad: number | null;
  /** A plain document's tokens (every one trainable). */
  encodeDocument(text: string): TokenizedDocument;
  /**
   * A conversation rendered with the chat template, with `trainable` set on
   * the assistant messages' tokens. Throws a ModelError starting with `where`
   * (the file and line) for a conversation it cannot render or split.
   */
  encodeChat(messages: readonly ChatMessage[], where: string): TokenizedDocument;
}
