/**
 * Registers the factory as backend "mpi" in @ulysses/collectives' registry,
 * so `init({ backend: "mpi" })` works in every process once this package has
 * been imported. Importing twice (source and build copies) is harmless.
 */
import { getBackend, registerBackend } from "@ulysses/collectives";
import { mpiBackend } from "./backend.js";

export const MPI_BACKEND_NAME = "mpi";

/** Registers backend "mpi" unless a backend of that name exists already. */
export function registerMpiBackend(): void {
  if (!getBackend(MPI_BACKEND_NAME)) registerBackend(MPI_BACKEND_NAME, mpiBackend);
}

registerMpiBackend();
