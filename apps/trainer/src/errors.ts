/** The one error class of the trainer. Messages carry the offending values. */
export class TrainerError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TrainerError";
  }
}
