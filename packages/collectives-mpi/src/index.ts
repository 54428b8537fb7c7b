/**
 * @ulysses/collectives-mpi: the OpenMPI backend of the ProcessGroup. Ranks are
 * processes started by mpirun; a small N-API addon of our own runs MPI on the
 * tensors' TypedArray memory off the JS thread. Without MPI installed the
 * package still imports; asking for the backend then explains how to get it.
 * Importing the package registers the backend as "mpi".
 */
export { MpiError } from "./errors.js";
export { mpiBackend, type MpiInitOptions } from "./backend.js";
export { registerMpiBackend, MPI_BACKEND_NAME } from "./register.js";
export { MpiGroup } from "./mpi-group.js";
export { REDUCTION_MODES, type ReductionMode } from "./reductions.js";
export { addonBuilt, mpirunAvailable, loadAddon, ADDON_PATH, INSTALL_HINT, type NativeMpi } from "./addon.js";
export { BUILD_ADDON_COMMAND, isCi, mpiTestSkipNote, mpiUnusableReason, type MpiProbeOptions } from "./availability.js";
export { finalizeMpi, abortJob } from "./lifecycle.js";
export { mpirunCommand, SOURCE_CONDITION_ARG, type MpirunOptions } from "./launch.js";
