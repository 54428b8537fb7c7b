/** The one error class of @ulysses/measure. Messages carry the offending values. */
export class MeasureError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "MeasureError";
  }
}
