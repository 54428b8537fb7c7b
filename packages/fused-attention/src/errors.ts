/** The one error class of @ulysses/fused-attention. Messages carry the offending values. */
export class FusedAttentionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "FusedAttentionError";
  }
}
