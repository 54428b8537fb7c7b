/**
 * The conversation of one chat JSONL line: {"messages": [{"role": "user",
 * "content": "..."}, ...]}. Other top-level fields are ignored (ids, sources)
 * except "tools", which a chat template would render and we do not pass on,
 * so it is refused rather than silently dropped. Each message is an object
 * with exactly a string "role" and a string "content"; anything else
 * (no content, a list of content parts, tool_calls, reasoning_content) is
 * refused by name, as is an empty list of messages.
 */
import type { ChatMessage } from "@ulysses/model";

/** The messages of a parsed line, or what is wrong with it (starting with `where`). */
export function chatMessages(value: object, where: string): ChatMessage[] | string {
  if (!("messages" in value))
    return `${where} has no "messages" field (keys: ${Object.keys(value).join(", ").slice(0, 80) || "none"})${"text" in value ? '; a {"text"} line is read with the jsonl format' : ""}`;
  if ("tools" in value) return `${where} has "tools", which is not supported (a chat template would render them)`;
  const list = (value as { messages: unknown }).messages;
  if (!Array.isArray(list)) return `${where}: "messages" must be a list of {"role", "content"} objects, got ${kind(list)}`;
  if (list.length === 0) return `${where}: "messages" is an empty list`;
  const messages: ChatMessage[] = [];
  for (let i = 0; i < list.length; i++) {
    const message: unknown = list[i];
    const at = `${where}: messages[${i}]`;
    if (message === null || typeof message !== "object" || Array.isArray(message)) return `${at} must be a {"role", "content"} object, got ${kind(message)}`;
    const { role, content } = message as { role?: unknown; content?: unknown };
    if (typeof role !== "string" || role.length === 0) return `${at}: "role" must be a non-empty string, got ${kind(role)}`;
    if (typeof content !== "string") return `${at} (${shortRole(role)}): "content" must be a string, got ${kind(content)}`;
    const extra = Object.keys(message).filter((key) => key !== "role" && key !== "content");
    if (extra.length > 0)
      return `${at} (${shortRole(role)}) has ${extra.map((k) => JSON.stringify(k).slice(0, 40)).join(", ")}: only "role" and "content" are supported`;
    messages.push({ role, content });
  }
  return messages;
}

function kind(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  return typeof value === "string" ? `the string ${JSON.stringify(value.slice(0, 40))}` : typeof value;
}

function shortRole(role: string): string {
  return role.length > 24 ? `${role.slice(0, 21)}...` : role;
}
