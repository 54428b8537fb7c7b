/**
 * The loss mask of a chat conversation: which tokens of the rendered
 * conversation are an assistant's. The rule (every step checked; what does
 * not fit is refused with the caller's file and line):
 *
 * 1. The conversation is rendered whole (F) and tokenized whole, as
 *    transformers' apply_chat_template(tokenize=True) does.
 * 2. Each message's part of F is found by rendering the conversation again
 *    with that message's content replaced by a marker sharing neither its
 *    first nor its last character: F and that render agree before the first
 *    difference and after the last, and what lies between in F is what the
 *    template made of that content. (Qwen3's template writes a final turn's
 *    reasoning as a <think> block: that block is then part of it.) An
 *    assistant message that leaves no trace in F is refused.
 * 3. The parts are in message order and do not overlap.
 * 4. An assistant message's trained text runs from the start of its part to
 *    the end of the first special token (an added token marked special in
 *    tokenizer.json: <|im_end|>, <|eot_id|>, </s>, <end_of_turn>) after it,
 *    its end of turn, which must come before the next message's part. The
 *    header before the content ("<|im_start|>assistant\n") is not trained.
 * 5. Character bounds become token bounds: F is cut at the bounds and each
 *    piece tokenized alone; when the pieces' ids equal F's, the pieces' sizes
 *    are the bounds. When they do not (a token of F straddles a bound), the
 *    bound is the length of the longest common prefix of F's ids and the ids
 *    of F up to the bound: a straddling token belongs to the text after.
 */
import { ModelError } from "./errors.js";
import type { ChatMessage, TokenizedDocument } from "./tokenized-document.js";

export interface ChatRenderer {
  /** The conversation as the chat template writes it (add_generation_prompt false); throws with the template's message. */
  render(messages: readonly ChatMessage[]): string;
  /** Token ids of `text`, no special tokens added. */
  encode(text: string): number[];
  /** The text of each special added token. */
  readonly specialTokens: readonly string[];
}

/** Private-use characters for markers: no template or tokenizer treats them specially. */
const MARKS = ["\uE000", "\uE001", "\uE002"];

/** Character range [start, end) of F. */
interface Range {
  start: number;
  end: number;
}

/** `messages` rendered and tokenized, `trainable` set on the assistant messages' tokens (see the rule above). */
export function encodeChatSpans(renderer: ChatRenderer, messages: readonly ChatMessage[], where: string): TokenizedDocument {
  const render = (list: readonly ChatMessage[]): string => {
    try {
      return renderer.render(list);
    } catch (cause) {
      throw new ModelError(`${where}: the chat template cannot render this conversation: ${(cause as Error).message}`, { cause });
    }
  };
  const full = render(messages);
  const parts = messages.map((message, k) => {
    const marker = markerFor(message.content);
    const marked = render(messages.map((m, j) => (j === k ? { role: m.role, content: marker } : m)));
    if (marked === full) return null;
    const prefix = commonPrefix(full, marked);
    const suffix = Math.min(commonSuffix(full, marked), Math.min(full.length, marked.length) - prefix);
    return { start: prefix, end: full.length - suffix };
  });
  let previous = 0;
  parts.forEach((part, k) => {
    if (part === null) {
      if (messages[k]!.role === "assistant") throw new ModelError(`${where}: the chat template does not render the content of message ${k} (assistant)`);
      return;
    }
    if (part.start < previous)
      throw new ModelError(
        `${where}: the chat template renders message ${k} (${messages[k]!.role}) before the end of an earlier message; its parts cannot be told apart`,
      );
    previous = part.end;
  });
  const trained: Range[] = [];
  parts.forEach((part, k) => {
    if (part === null || messages[k]!.role !== "assistant") return;
    const next = parts.slice(k + 1).find((p) => p !== null);
    const limit = next?.start ?? full.length;
    const end = endOfTurn(full, part.end, limit, renderer.specialTokens);
    if (end === null)
      throw new ModelError(
        `${where}: the chat template puts no special token (an end of turn such as <|im_end|>) after the content of message ${k} (assistant)`,
      );
    trained.push({ start: part.start, end });
  });
  return tokenize(renderer, full, trained);
}

/** A marker whose first and last characters differ from `content`'s. */
function markerFor(content: string): string {
  const first = MARKS.find((m) => m !== content.charAt(0))!;
  const last = MARKS.find((m) => m !== content.charAt(content.length - 1) && m !== first)!;
  return `${first}marker${last}`;
}

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

function commonSuffix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a.charCodeAt(a.length - 1 - i) === b.charCodeAt(b.length - 1 - i)) i++;
  return i;
}

/** The end of the first special token in full[from, limit), or null. */
function endOfTurn(full: string, from: number, limit: number, specials: readonly string[]): number | null {
  let best: number | null = null;
  let bestAt = Number.POSITIVE_INFINITY;
  for (const token of specials) {
    if (token.length === 0) continue;
    const at = full.indexOf(token, from);
    if (at >= 0 && at + token.length <= limit && at < bestAt) {
      bestAt = at;
      best = at + token.length;
    }
  }
  return best;
}

/** F's ids, and 1 on the tokens of the trained ranges (sorted, disjoint). */
function tokenize(renderer: ChatRenderer, full: string, trained: readonly Range[]): TokenizedDocument {
  const ids = renderer.encode(full);
  const bounds = [...new Set([0, ...trained.flatMap((r) => [r.start, r.end]), full.length])].sort((a, b) => a - b);
  // token bound of each character bound: from the pieces when they tokenize as F does, else by common prefix
  const tokenBound = new Map<number, number>();
  let total = 0;
  const pieces: number[] = [];
  for (let i = 0; i + 1 < bounds.length; i++) {
    const piece = renderer.encode(full.slice(bounds[i], bounds[i + 1]));
    tokenBound.set(bounds[i]!, total);
    pieces.push(...piece);
    total += piece.length;
  }
  tokenBound.set(full.length, total);
  if (pieces.length !== ids.length || pieces.some((id, i) => id !== ids[i])) {
    for (const bound of bounds) {
      const before = renderer.encode(full.slice(0, bound));
      let n = 0;
      while (n < before.length && n < ids.length && before[n] === ids[n]) n++;
      tokenBound.set(bound, bound === full.length ? ids.length : n);
    }
  }
  const trainable = new Uint8Array(ids.length);
  for (const range of trained) trainable.fill(1, tokenBound.get(range.start)!, Math.max(tokenBound.get(range.start)!, tokenBound.get(range.end)!));
  return { ids: Int32Array.from(ids), trainable };
}
