// See ort-api.h.
#include "ort-api.h"

#include <dlfcn.h>

#include <mutex>

namespace ulysses {
namespace {

std::mutex g_mutex;
OrtRuntimeInfo g_info;

}  // namespace

const OrtRuntimeInfo& load_ort(const std::string& library_path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_info.api) return g_info;
  // RTLD_NOLOAD: only a library already in the process. The soname matches
  // whatever path onnxruntime-node's binding loaded it from.
  void* handle = dlopen("libonnxruntime.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!handle && !library_path.empty()) handle = dlopen(library_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!handle) {
    throw std::runtime_error("libonnxruntime.so.1 is not loaded in this process (looked for it by soname and at '" +
                             library_path + "'): import onnxruntime-node before the fused-attention addon");
  }
  using GetApiBaseFn = const OrtApiBase* (*)();
  auto get_api_base = reinterpret_cast<GetApiBaseFn>(dlsym(handle, "OrtGetApiBase"));
  if (!get_api_base) throw std::runtime_error("libonnxruntime.so.1 has no OrtGetApiBase symbol");
  const OrtApiBase* base = get_api_base();
  const char* version = base->GetVersionString();
  const OrtApi* api = base->GetApi(kOrtApiVersion);
  if (!api) {
    throw std::runtime_error(std::string("ONNX Runtime ") + version + " does not provide C API version " +
                             std::to_string(kOrtApiVersion) + " (the version of the headers this addon was built with)");
  }
  g_info.api = api;
  g_info.version = version;
  return g_info;
}

const OrtApi* ort_api() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_info.api;
}

void check_status(const OrtApi* api, OrtStatus* status, const char* what) {
  if (!status) return;
  std::string message = std::string(what) + ": " + api->GetErrorMessage(status);
  api->ReleaseStatus(status);
  throw std::runtime_error(message);
}

}  // namespace ulysses
