/**
 * encodeChatSpans on a toy template and a toy tokenizer, worked by hand: the
 * trained text of each assistant message (its content through the first
 * special token after it), and the token bounds when a token straddles a
 * character bound (the tokenizer merges ">H" into one token: that token then
 * belongs to the text after the bound).
 */
import { describe, expect, it } from "vitest";
import { encodeChatSpans, type ChatRenderer } from "./chat-spans.js";
import type { ChatMessage } from "./tokenized-document.js";

const END = 1000;
const MERGED = 2000;

/** "<role>content</s>" per message; "</s>" is special; ">H" is one token when `merge`; else one token per character. */
function toy(merge: boolean): ChatRenderer {
  return {
    render: (messages: readonly ChatMessage[]) => messages.map((m) => `<${m.role}>${m.content}</s>`).join(""),
    encode: (text: string) => {
      const ids: number[] = [];
      for (let i = 0; i < text.length; ) {
        if (text.startsWith("</s>", i)) {
          ids.push(END);
          i += 4;
        } else if (merge && text.startsWith(">H", i)) {
          ids.push(MERGED);
          i += 2;
        } else ids.push(text.charCodeAt(i++));
      }
      return ids;
    },
    specialTokens: ["</s>"],
  };
}

const codes = (text: string) => [...text].map((c) => c.charCodeAt(0));
const messages = [
  { role: "user", content: "Yo" },
  { role: "assistant", content: "Hi" },
  { role: "user", content: "Ok" },
  { role: "assistant", content: "" },
];

describe("encodeChatSpans (toy template)", () => {
  it("trains each assistant content and its end token, and nothing else", () => {
    const got = encodeChatSpans(toy(false), messages, "toy");
    const ids = [...codes("<user>Yo"), END, ...codes("<assistant>Hi"), END, ...codes("<user>Ok"), END, ...codes("<assistant>"), END];
    const trainable = [...codes("<user>Yo").map(() => 0), 0, ...codes("<assistant>").map(() => 0), 1, 1, 1, ...codes("<user>Ok").map(() => 0), 0];
    trainable.push(...codes("<assistant>").map(() => 0), 1);
    expect([...got.ids]).toEqual(ids);
    expect([...got.trainable!]).toEqual(trainable);
  });

  it("a token straddling a bound goes with the text after it", () => {
    const got = encodeChatSpans(toy(true), messages, "toy");
    // "<assistant" then ">H" merged (straddles the content's start: trained), "i", </s>
    const ids = [...codes("<user>Yo"), END, ...codes("<assistant"), MERGED, ...codes("i"), END, ...codes("<user>Ok"), END, ...codes("<assistant>"), END];
    const trainable = [...codes("<user>Yo").map(() => 0), 0, ...codes("<assistant").map(() => 0), 1, 1, 1, ...codes("<user>Ok").map(() => 0), 0];
    trainable.push(...codes("<assistant>").map(() => 0), 1);
    expect([...got.ids]).toEqual(ids);
    expect([...got.trainable!]).toEqual(trainable);
  });

  it("refuses a template that renders a later message inside an earlier one", () => {
    const backwards: ChatRenderer = {
      ...toy(false),
      render: (list) =>
        [...list]
          .reverse()
          .map((m) => `<${m.role}>${m.content}</s>`)
          .join(""),
    };
    expect(() => encodeChatSpans(backwards, messages, "toy line 9")).toThrow(
      /^toy line 9: the chat template renders message 1 \(assistant\) before the end of an earlier message/,
    );
  });
});
