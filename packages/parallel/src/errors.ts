/** The one error class of @ulysses/parallel. Messages carry the offending values. */
export class ParallelError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ParallelError";
  }
}
