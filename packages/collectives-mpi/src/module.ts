/**
 * The backend as a module for `init({ backend: "<path to this file>" })`
 * (and the trainer's `--backend <module path>`): its default export is the
 * "mpi" factory, so code that cannot import the package by name can still
 * load it by path.
 */
import { mpiBackend } from "./backend.js";

export default mpiBackend;
