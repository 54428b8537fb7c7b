/** The one error class of @ulysses/tensors. Messages carry the offending values. */
export class TensorError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TensorError";
  }
}
