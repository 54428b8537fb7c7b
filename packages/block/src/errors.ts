/** The one error class of @ulysses/block. Messages carry the offending values. */
export class BlockError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "BlockError";
  }
}
