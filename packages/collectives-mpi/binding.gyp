# Builds ulysses_mpi.node: the N-API addon that calls OpenMPI on TypedArray
# memory. Compile and link flags come from the MPI compiler wrapper, so the
# same file builds against any OpenMPI (or MPICH) install whose mpicc is on
# PATH. scripts/build-addon.mjs runs node-gyp on it (skipping without mpicc).
{
  "targets": [
    {
      "target_name": "ulysses_mpi",
      "sources": [
        "native/addon.cc",
        "native/lanes.cc",
        "native/comms.cc",
        "native/collective-ops.cc",
        "native/reduce.cc"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "OMPI_SKIP_MPICXX=1", "MPICH_SKIP_MPICXX=1"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-fexceptions", "-O3", "<!@(mpicc --showme:compile)"],
      "libraries": ["<!@(mpicc --showme:link)"]
    }
  ]
}
