# Builds ulysses_fused_attention.node: the ONNX Runtime custom ops (CPU
# kernels; CUDA kernels when cuda_object names an nvcc-built object) and the
# N-API binding that runs sessions using them. scripts/build-native.mjs runs
# node-gyp on it and passes the variables below (-D...).
{
  "variables": {
    "ort_include%": "build/ort-headers/usr/include/onnxruntime",
    "cuda_object%": "",
    "cuda_lib_dir%": ""
  },
  "targets": [
    {
      "target_name": "ulysses_fused_attention",
      "sources": [
        "native/src/addon.cc",
        "native/src/ort-api.cc",
        "native/src/custom-ops.cc",
        "native/src/cpu/dispatch.cc",
        "native/src/cpu/adamw.cc",
        "native/src/cpu/adamw-avx512.cc",
        "native/src/cpu/kernels-avx512.cc",
        "native/src/cpu/kernels-avx2.cc",
        "native/src/cpu/kernels-portable.cc"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "<(ort_include)",
        "native/src"
      ],
      # NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS: a Napi::Error raised while the
      # thread is stopping (JavaScript can no longer run) is dropped instead of
      # ending the process in std::terminate.
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-fexceptions", "-std=c++17", "-O3", "-fno-math-errno", "-Wno-maybe-uninitialized", "-Wno-psabi"],
      "libraries": ["-ldl", "-lpthread"],
      "conditions": [
        ["cuda_object!=''", {
          "defines": ["ULYSSES_WITH_CUDA=1"],
          "libraries": ["<(cuda_object)", "-L<(cuda_lib_dir)", "-lcudart_static", "-lrt"]
        }]
      ]
    }
  ]
}
