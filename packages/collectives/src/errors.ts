/** The one error class of @ulysses/collectives. Messages carry the offending ranks and values. */
export class CollectiveError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CollectiveError";
  }
}
