/** The one error class of @ulysses/kernels. Messages carry the offending values. */
export class KernelError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "KernelError";
  }
}
