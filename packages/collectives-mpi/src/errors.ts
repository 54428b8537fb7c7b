/**
 * The one error class of @ulysses/collectives-mpi. It extends the
 * collectives' CollectiveError, so callers that catch collective failures
 * catch MPI ones too; argument mismatches found by the shared validation are
 * plain CollectiveErrors with the same text as on every other backend.
 */
import { CollectiveError } from "@ulysses/collectives";

export class MpiError extends CollectiveError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "MpiError";
  }
}
