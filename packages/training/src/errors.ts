/** The one error class of @ulysses/training. Messages carry the offending values. */
export class TrainingError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TrainingError";
  }
}
