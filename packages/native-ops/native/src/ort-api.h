// Access to the ONNX Runtime C API of the libonnxruntime.so.1 that
// onnxruntime-node has already loaded into this process: the library is found
// with dlopen(RTLD_NOLOAD) (never loaded a second time) and the OrtApi table is
// taken from its OrtGetApiBase(). Only the C API headers are needed at build
// time; nothing links against the library.
#pragma once

#include <onnxruntime_c_api.h>

#include <stdexcept>
#include <string>

namespace ulysses {

// The API version requested: the headers' own (21 for the Debian trixie
// headers); runtimes at least that new (onnxruntime-node 1.30) provide it.
constexpr uint32_t kOrtApiVersion = ORT_API_VERSION;

struct OrtRuntimeInfo {
  const OrtApi* api = nullptr;
  std::string version;  // the runtime's version string, e.g. "1.30.0"
};

// Finds the loaded runtime (by soname, then by `library_path`) and its API.
// Throws std::runtime_error naming what is missing. Safe to call repeatedly
// and from several threads; the first success is kept.
const OrtRuntimeInfo& load_ort(const std::string& library_path);

// The API table once load_ort has succeeded, else nullptr.
const OrtApi* ort_api();

// Throws std::runtime_error with ONNX Runtime's message when `status` is an
// error (and releases it).
void check_status(const OrtApi* api, OrtStatus* status, const char* what);

}  // namespace ulysses
