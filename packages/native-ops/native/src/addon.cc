// The N-API binding (node-addon-api): just enough of the ONNX Runtime C API to
// run our small graphs on caller memory.
//
//   init(libraryPath) -> { ortVersion, apiVersion, cpuIsa, cudaCompiled }
//   new Runtime({ threads, isa, cuda, graphThreads, memoryArena, allowSpinning })
//                                    session options + our custom-op domain;
//                                    graphThreads etc. for general graphs (the
//                                    ops of FusedOps), see GraphOptions
//   new Session(runtime, modelBytes) an ONNX Runtime session of one graph
//   session.run(inputNames, inputs, inputDims, outputNames, outputs, outputDims)
//                                    -> Promise<void>, off the JS thread
//   session.runSync(...the same)     -> undefined, on the calling thread
//   runtime.release(), session.release()
//   geluForward(x, y, isa?), geluBackward(x, dy, dx, isa?)
//                                    GELU (tanh approximation) on Float32Arrays
//                                    of one length, synchronously on the JS
//                                    thread: y = gelu(x), dx = dy * gelu'(x)
//   addInto(term, target, isa?)      target += term on Float32Arrays of one
//                                    length, synchronously on the JS thread
//   adamwUpdate(params, grads, m, v, decayMask, beta1, beta2, eps, lr, decay, c1, c2, isa?)
//                                    one AdamW update in place, float64 per
//                                    element as @ulysses/training's loop
//   weightGradient(x, dy, into, rows, in, out, threads, isa?)
//                                    into += x^T dy in place (a linear layer's
//                                    weight gradient), on the calling thread
//                                    and threads - 1 more
//   matmul(x, w, y, rows, in, out, threads, isa?)
//                                    y = x w into a caller array (a deep
//                                    product: the tied LM head's input
//                                    gradient), threads as weightGradient
//   crossEntropy(logits, labels, rowLoss, argmax, rows, vocab, ignoreIndex, gradScale, threads, isa?)
//                                    per row: logsumexp - logit[label] and the
//                                    argmax; the loss's gradient over logits
//                                    in place when gradScale is a number
//   rope(x, cos, sin, y, tokens, heads, headDim, tableRows, backward, threads, isa?)
//   layerNormForward(x, gamma, beta, y, mean, rstd, rows, h, eps, threads, isa?)
//   layerNormBackward(x, gamma, mean, rstd, dy, dx, dGamma, dBeta, rows, h, threads, isa?)
//                                    rotary embedding and LayerNorm into
//                                    caller arrays, on the calling thread
//                                    and up to threads - 1 more
//   sharedMemory(name, bytes) -> ArrayBuffer
//                                    process-wide memory under `name`: the
//                                    first call maps `bytes` zeroed bytes,
//                                    later calls (any thread of the process)
//                                    with that name and size get another
//                                    ArrayBuffer over the same bytes; unmapped
//                                    when the last of them is collected
//   setMmapThreshold(bytes) -> boolean   glibc: serve allocations of at least
//                                    `bytes` with mmap, so freed large buffers
//                                    go back to the OS (false: not glibc)
//
// Inputs and outputs are Float32Arrays (Int32Arrays too: the document ids)
// wrapped with
// CreateTensorWithDataAsOrtValue (no copies); the outputs are pre-allocated
// by the caller and ONNX Runtime writes into them. The arrays are kept alive
// (referenced) until the run settles. Sessions keep their runtime (and so the
// custom-op domain they were created with) alive; a run keeps its session.
#include <napi.h>
#include <v8.h>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#endif

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cpu/attention-cpu.h"
#include "custom-ops.h"
#include "ort-api.h"

namespace ulysses {
namespace {

const napi_type_tag kRuntimeTag = {0x7c1d5e3a9b2f4c61ULL, 0x8e4a0d6b1f3c2a95ULL};

const OrtApi* require_api(Napi::Env env) {
  const OrtApi* api = ort_api();
  if (!api) throw Napi::Error::New(env, "fused-attention addon: init(libraryPath) must succeed first");
  return api;
}

// Session options with the custom-op domain; owns the op structs the domain
// points at, so it must outlive every session created from it.
struct RuntimeState {
  const OrtApi* api = nullptr;
  OrtEnv* env = nullptr;
  OrtSessionOptions* options = nullptr;
  OrtCustomOpDomain* domain = nullptr;
  OrtMemoryInfo* cpu_memory = nullptr;
  std::vector<std::unique_ptr<FlashOp>> ops;

  ~RuntimeState() {
    if (options) api->ReleaseSessionOptions(options);
    if (domain) api->ReleaseCustomOpDomain(domain);
    if (cpu_memory) api->ReleaseMemoryInfo(cpu_memory);
    if (env) api->ReleaseEnv(env);
  }
};

struct SessionState {
  std::shared_ptr<RuntimeState> runtime;
  OrtSession* session = nullptr;
  ~SessionState() {
    if (session) runtime->api->ReleaseSession(session);
  }
};

// How the sessions run graphs other than the attention op's one node. The
// defaults suit that one node: one intra-op thread (the kernel threads
// itself) and no arena (its outputs are the caller's arrays).
struct GraphOptions {
  int intra_op_threads = 1;
  // ONNX Runtime's CPU arena and memory-pattern planning for the graphs'
  // intermediates (outputs are the caller's arrays either way).
  bool memory_arena = false;
  // Whether idle intra-op threads spin (only with intra_op_threads > 1).
  bool allow_spinning = false;
};

std::shared_ptr<RuntimeState> create_runtime(const OrtApi* api, int threads, CpuIsa isa, bool cuda, const GraphOptions& graph) {
  auto state = std::make_shared<RuntimeState>();
  state->api = api;
  // ONNX Runtime keeps one environment per process: this returns (and
  // references) the one onnxruntime-node created.
  check_status(api, api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "ulysses-fused-attention", &state->env), "CreateEnv");
  check_status(api, api->DisableTelemetryEvents(state->env), "DisableTelemetryEvents");
  check_status(api, api->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &state->cpu_memory), "CreateCpuMemoryInfo");
  check_status(api, api->CreateSessionOptions(&state->options), "CreateSessionOptions");
  // The attention graphs are one node, threaded by the kernel itself: ONNX
  // Runtime's own pool would only sit idle (graph.intra_op_threads = 1).
  check_status(api, api->SetIntraOpNumThreads(state->options, graph.intra_op_threads), "SetIntraOpNumThreads");
  check_status(api, api->SetInterOpNumThreads(state->options, 1), "SetInterOpNumThreads");
  check_status(api, api->SetSessionExecutionMode(state->options, ORT_SEQUENTIAL), "SetSessionExecutionMode");
  check_status(api, api->SetSessionGraphOptimizationLevel(state->options, ORT_ENABLE_ALL), "SetSessionGraphOptimizationLevel");
  check_status(api, api->SetSessionLogSeverityLevel(state->options, 3), "SetSessionLogSeverityLevel");
  check_status(api, api->AddSessionConfigEntry(state->options, "session.intra_op.allow_spinning", graph.allow_spinning ? "1" : "0"),
               "AddSessionConfigEntry");
  if (graph.memory_arena) {
    check_status(api, api->EnableCpuMemArena(state->options), "EnableCpuMemArena");
    check_status(api, api->EnableMemPattern(state->options), "EnableMemPattern");
  } else {
    // The outputs are the caller's arrays: an arena would only keep scratch alive.
    check_status(api, api->DisableCpuMemArena(state->options), "DisableCpuMemArena");
    check_status(api, api->DisableMemPattern(state->options), "DisableMemPattern");
  }
  check_status(api, api->CreateCustomOpDomain(kCustomOpDomain, &state->domain), "CreateCustomOpDomain");
  std::vector<bool> providers = {false};
  if (cuda_compiled()) providers.push_back(true);
  for (bool on_cuda : providers) {
    for (OpKind kind : {OpKind::Forward, OpKind::Backward}) {
      auto op = std::make_unique<FlashOp>();
      init_flash_op(op.get(), kind, on_cuda, threads, isa);
      check_status(api, api->CustomOpDomain_Add(state->domain, &op->base), "CustomOpDomain_Add");
      state->ops.push_back(std::move(op));
    }
  }
  check_status(api, api->AddCustomOpDomain(state->options, state->domain), "AddCustomOpDomain");
  if (cuda) {
    OrtCUDAProviderOptions cuda_options{};
    cuda_options.device_id = 0;
    check_status(api, api->SessionOptionsAppendExecutionProvider_CUDA(state->options, &cuda_options),
                 "the CUDA execution provider could not be added (onnxruntime-node's CUDA binaries are needed)");
  }
  return state;
}

class Runtime : public Napi::ObjectWrap<Runtime> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Runtime", {InstanceMethod<&Runtime::Release>("release")});
  }

  Runtime(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Runtime>(info) {
    Napi::Env env = info.Env();
    const OrtApi* api = require_api(env);
    Napi::Object options = info.Length() > 0 && info[0].IsObject() ? info[0].As<Napi::Object>() : Napi::Object::New(env);
    const int threads = options.Has("threads") ? options.Get("threads").ToNumber().Int32Value() : 1;
    const bool cuda = options.Has("cuda") && options.Get("cuda").ToBoolean().Value();
    if (threads < 1) throw Napi::RangeError::New(env, "Runtime: threads must be >= 1, got " + std::to_string(threads));
    const std::string isa_name = options.Has("isa") ? options.Get("isa").ToString().Utf8Value() : "auto";
    CpuIsa isa;
    if (!parse_cpu_isa(isa_name.c_str(), &isa)) {
      throw Napi::RangeError::New(env, "Runtime: isa must be auto, avx512, avx2 or portable, got '" + isa_name + "'");
    }
    if (!cpu_isa_name(isa)) throw Napi::Error::New(env, "Runtime: this processor cannot run the '" + isa_name + "' CPU kernels");
    GraphOptions graph;
    if (options.Has("graphThreads")) graph.intra_op_threads = options.Get("graphThreads").ToNumber().Int32Value();
    if (graph.intra_op_threads < 1) {
      throw Napi::RangeError::New(env, "Runtime: graphThreads must be >= 1, got " + std::to_string(graph.intra_op_threads));
    }
    graph.memory_arena = options.Has("memoryArena") && options.Get("memoryArena").ToBoolean().Value();
    graph.allow_spinning = options.Has("allowSpinning") && options.Get("allowSpinning").ToBoolean().Value();
    try {
      state_ = create_runtime(api, threads, isa, cuda, graph);
    } catch (const std::exception& e) {
      throw Napi::Error::New(env, std::string("Runtime: ") + e.what());
    }
    info.This().As<Napi::Object>().TypeTag(&kRuntimeTag);
  }

  std::shared_ptr<RuntimeState> state(Napi::Env env) const {
    if (!state_) throw Napi::Error::New(env, "the fused-attention Runtime was released");
    return state_;
  }

 private:
  Napi::Value Release(const Napi::CallbackInfo& info) {
    state_.reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<RuntimeState> state_;
};

struct Binding {
  std::vector<std::string> names;
  std::vector<Napi::ObjectReference> arrays;  // keep the memory alive
  std::vector<OrtValue*> values;
};

// Wraps names[i] / arrays[i] (Float32Array or Int32Array) / dims[i] as OrtValues.
Binding bind(Napi::Env env, const RuntimeState& rt, const Napi::Value& names_v, const Napi::Value& arrays_v,
             const Napi::Value& dims_v, const char* what) {
  if (!names_v.IsArray() || !arrays_v.IsArray() || !dims_v.IsArray()) {
    throw Napi::TypeError::New(env, std::string("Session.run: ") + what + " names, arrays and dims must be arrays");
  }
  auto names = names_v.As<Napi::Array>();
  auto arrays = arrays_v.As<Napi::Array>();
  auto dims = dims_v.As<Napi::Array>();
  if (names.Length() != arrays.Length() || names.Length() != dims.Length()) {
    throw Napi::TypeError::New(env, std::string("Session.run: ") + what + " names, arrays and dims differ in length");
  }
  // Validate everything before creating any OrtValue.
  struct Spec {
    void* data;
    size_t count;
    size_t element_bytes;
    ONNXTensorElementDataType type;
    std::vector<int64_t> shape;
  };
  Binding b;
  std::vector<Spec> specs;
  static float empty = 0.0f;
  for (uint32_t i = 0; i < names.Length(); ++i) {
    b.names.push_back(names.Get(i).ToString().Utf8Value());
    Napi::Value a = arrays.Get(i);
    const napi_typedarray_type kind = a.IsTypedArray() ? a.As<Napi::TypedArray>().TypedArrayType() : napi_uint8_clamped_array;
    if (kind != napi_float32_array && kind != napi_int32_array) {
      throw Napi::TypeError::New(env, "Session.run: " + std::string(what) + " '" + b.names.back() + "' must be a Float32Array or an Int32Array");
    }
    if (!dims.Get(i).IsArray()) {
      throw Napi::TypeError::New(env, "Session.run: dims of '" + b.names.back() + "' must be an array");
    }
    auto typed = a.As<Napi::TypedArray>();
    auto d = dims.Get(i).As<Napi::Array>();
    const bool floats = kind == napi_float32_array;
    Spec spec{nullptr, 1, floats ? sizeof(float) : sizeof(int32_t),
              floats ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32, {}};
    for (uint32_t j = 0; j < d.Length(); ++j) {
      const int64_t n = d.Get(j).ToNumber().Int64Value();
      if (n < 0) throw Napi::RangeError::New(env, "Session.run: negative dimension for '" + b.names.back() + "'");
      spec.shape.push_back(n);
      spec.count *= static_cast<size_t>(n);
    }
    if (spec.count != typed.ElementLength()) {
      throw Napi::RangeError::New(env, "Session.run: '" + b.names.back() + "' has " + std::to_string(typed.ElementLength()) +
                                           " elements but its dims need " + std::to_string(spec.count));
    }
    // TypedArrayOf::Data() takes the pointer napi_get_typedarray_info gives,
    // which works for SharedArrayBuffer-backed arrays too.
    void* data = floats ? static_cast<void*>(a.As<Napi::Float32Array>().Data()) : static_cast<void*>(a.As<Napi::Int32Array>().Data());
    spec.data = spec.count ? data : static_cast<void*>(&empty);
    specs.push_back(std::move(spec));
    b.arrays.push_back(Napi::Persistent(a.As<Napi::Object>()));
  }
  for (const Spec& spec : specs) {
    OrtValue* value = nullptr;
    OrtStatus* status = rt.api->CreateTensorWithDataAsOrtValue(rt.cpu_memory, spec.data, spec.count * spec.element_bytes,
                                                               spec.shape.data(), spec.shape.size(), spec.type, &value);
    if (status) {
      for (OrtValue* v : b.values) rt.api->ReleaseValue(v);
      std::string message = rt.api->GetErrorMessage(status);
      rt.api->ReleaseStatus(status);
      throw Napi::Error::New(env, "Session.run: " + message);
    }
    b.values.push_back(value);
  }
  return b;
}

// Binds a run's inputs and outputs (arguments 0-2 and 3-5 of run / runSync);
// on a bad output, the inputs already bound are released.
std::pair<Binding, Binding> bind_run(const Napi::CallbackInfo& info, const RuntimeState& rt) {
  Binding inputs = bind(info.Env(), rt, info[0], info[1], info[2], "input");
  try {
    return {std::move(inputs), bind(info.Env(), rt, info[3], info[4], info[5], "output")};
  } catch (...) {
    for (OrtValue* v : inputs.values) rt.api->ReleaseValue(v);
    throw;
  }
}

// Runs the session on bound inputs and outputs; false with ONNX Runtime's
// message in *error when it fails.
bool run_bound(const SessionState& session, const Binding& inputs, Binding& outputs, std::string* error) {
  const OrtApi* api = session.runtime->api;
  std::vector<const char*> in_names, out_names;
  for (auto& n : inputs.names) in_names.push_back(n.c_str());
  for (auto& n : outputs.names) out_names.push_back(n.c_str());
  std::vector<const OrtValue*> in_values(inputs.values.begin(), inputs.values.end());
  OrtStatus* status = api->Run(session.session, nullptr, in_names.data(), in_values.data(), in_values.size(), out_names.data(),
                               out_names.size(), outputs.values.data());
  if (!status) return true;
  *error = api->GetErrorMessage(status);
  api->ReleaseStatus(status);
  return false;
}

// One Session.run off the JS thread. Its completion must never throw a C++
// exception: it is called from libuv, where an exception ends in
// std::terminate ("terminate called after throwing an instance of
// 'Napi::Error'", exit 134) for the whole process. That happens when the
// worker thread that started the run is going away (an uncaught error,
// process.exit() or worker.terminate() there): Node lets the run finish, then
// calls the completion while the thread can no longer run JavaScript, and
// every N-API call fails (node-addon-api's default completion turns that
// failure into a thrown Napi::Error). So the completion below uses the plain
// N-API calls and ignores their failures: with JavaScript gone there is
// nobody to tell, and the promise is dropped with its thread.
class RunWorker : public Napi::AsyncWorker {
 public:
  RunWorker(Napi::Env env, std::shared_ptr<SessionState> session, Binding inputs, Binding outputs)
      : Napi::AsyncWorker(env, "ulysses-fused-attention-run"),
        session_(std::move(session)),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)) {
    if (napi_create_promise(env, &deferred_, &promise_) != napi_ok) {
      throw Napi::Error::New(env, "Session.run: could not create a promise");
    }
  }

  ~RunWorker() override {
    const OrtApi* api = session_->runtime->api;
    for (OrtValue* v : inputs_.values) api->ReleaseValue(v);
    for (OrtValue* v : outputs_.values) api->ReleaseValue(v);
  }

  // Valid in the scope of the Session.run call that made this worker.
  napi_value Promise() const { return promise_; }

  void Execute() override {
    failed_ = !run_bound(*session_, inputs_, outputs_, &error_);
  }

 protected:
  void OnWorkComplete(Napi::Env env, napi_status status) override {
    // napi_cancelled: the run never started because the thread is going away.
    if (status != napi_cancelled) Settle(env);
    Destroy();  // delete this: releases the OrtValues, the arrays' references and the session
  }

 private:
  void Settle(napi_env env) noexcept {
    napi_handle_scope scope = nullptr;
    if (napi_open_handle_scope(env, &scope) != napi_ok) return;
    napi_value value = nullptr;
    if (!failed_) {
      if (napi_get_undefined(env, &value) == napi_ok) napi_resolve_deferred(env, deferred_, value);
    } else {
      napi_value message = nullptr;
      if (napi_create_string_utf8(env, error_.c_str(), error_.size(), &message) == napi_ok &&
          napi_create_error(env, nullptr, message, &value) == napi_ok) {
        napi_reject_deferred(env, deferred_, value);
      }
    }
    // A failure above may leave an exception pending (the thread is stopping): drop it.
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
      napi_value ignored;
      napi_get_and_clear_last_exception(env, &ignored);
    }
    napi_close_handle_scope(env, scope);
  }

  napi_deferred deferred_ = nullptr;
  napi_value promise_ = nullptr;
  std::shared_ptr<SessionState> session_;
  Binding inputs_;
  Binding outputs_;
  std::string error_;
  bool failed_ = false;
};

class Session : public Napi::ObjectWrap<Session> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Session",
                       {InstanceMethod<&Session::Run>("run"), InstanceMethod<&Session::RunSync>("runSync"),
                        InstanceMethod<&Session::Release>("release")});
  }

  Session(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Session>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 2 || !info[0].IsObject() || !info[0].As<Napi::Object>().CheckTypeTag(&kRuntimeTag)) {
      throw Napi::TypeError::New(env, "Session(runtime, model): runtime must be a Runtime");
    }
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      throw Napi::TypeError::New(env, "Session(runtime, model): model must be a Uint8Array of ONNX model bytes");
    }
    auto runtime = Runtime::Unwrap(info[0].As<Napi::Object>())->state(env);
    auto model = info[1].As<Napi::Uint8Array>();
    auto state = std::make_shared<SessionState>();
    state->runtime = runtime;
    OrtStatus* status = nullptr;
    {
      // ONNX Runtime registers a custom-op domain in ONNX's process-wide
      // domain-to-version map on the first session that uses it, with a
      // check-then-add that is not thread-safe: two worker threads creating
      // their first sessions at once fail with "the domain is already exist".
      // Session creation is rare (sessions are cached), so serialise it.
      static std::mutex create_mutex;
      std::lock_guard<std::mutex> lock(create_mutex);
      status = runtime->api->CreateSessionFromArray(runtime->env, model.Data(), model.ByteLength(), runtime->options, &state->session);
    }
    if (status) {
      std::string message = runtime->api->GetErrorMessage(status);
      runtime->api->ReleaseStatus(status);
      throw Napi::Error::New(env, "Session: ONNX Runtime could not create the session: " + message);
    }
    state_ = std::move(state);
  }

 private:
  Napi::Value Run(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!state_) throw Napi::Error::New(env, "Session.run: the session was released");
    if (info.Length() != 6) throw Napi::TypeError::New(env, "Session.run takes 6 arguments");
    auto [inputs, outputs] = bind_run(info, *state_->runtime);
    auto* worker = new RunWorker(env, state_, std::move(inputs), std::move(outputs));
    napi_value promise = worker->Promise();
    worker->Queue();
    return Napi::Value(env, promise);
  }

  // As run, on the calling thread (as onnxruntime-node runs its sessions):
  // for ops too short to pay for a hop to libuv's pool and back.
  Napi::Value RunSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!state_) throw Napi::Error::New(env, "Session.runSync: the session was released");
    if (info.Length() != 6) throw Napi::TypeError::New(env, "Session.runSync takes 6 arguments");
    const OrtApi* api = state_->runtime->api;
    auto [inputs, outputs] = bind_run(info, *state_->runtime);
    std::string error;
    const bool ok = run_bound(*state_, inputs, outputs, &error);
    for (OrtValue* v : inputs.values) api->ReleaseValue(v);
    for (OrtValue* v : outputs.values) api->ReleaseValue(v);
    if (!ok) throw Napi::Error::New(env, error);
    return env.Undefined();
  }

  Napi::Value Release(const Napi::CallbackInfo& info) {
    state_.reset();
    return info.Env().Undefined();
  }

  std::shared_ptr<SessionState> state_;
};

Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string path = info.Length() > 0 && info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  try {
    const OrtRuntimeInfo& ort = load_ort(path);
    Napi::Object out = Napi::Object::New(env);
    out.Set("ortVersion", ort.version);
    out.Set("apiVersion", static_cast<double>(kOrtApiVersion));
    out.Set("cpuIsa", cpu_isa_name());
    out.Set("cudaCompiled", cuda_compiled());
    return out;
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
}

// glibc's malloc raises its mmap threshold to the largest block freed (up to
// 32 MiB on 64-bit), after which freed activations stay in the heap instead of
// returning to the OS: a training step's peak RSS then counts every buffer
// the step ever freed. A fixed threshold (mallopt also stops the dynamic
// adjustment) keeps large buffers on mmap.
// Process-wide named memory: one mapping per name, shared by every thread
// (worker threads load this library once per process, so these statics are
// common to all of them). Each ArrayBuffer over a region holds one reference;
// the mapping goes when the last is collected.
struct SharedRegion {
  void* data;
  size_t bytes;
  size_t references;
};

std::mutex shared_regions_mutex;
std::unordered_map<std::string, SharedRegion> shared_regions;

// The backing store's deleter (V8 may call it on any thread, after the thread that made the view is gone).
void release_shared_region(void*, size_t, void* hint) {
  std::unique_ptr<std::string> owned(static_cast<std::string*>(hint));
  std::lock_guard<std::mutex> lock(shared_regions_mutex);
  auto found = shared_regions.find(*owned);
  if (found == shared_regions.end()) return;
  if (--found->second.references > 0) return;
  munmap(found->second.data, found->second.bytes);
  shared_regions.erase(found);
}

// sharedMemory(name, bytes) -> ArrayBuffer (see the list at the top).
Napi::Value SharedMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string signature = "sharedMemory(name, bytes)";
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber())
    throw Napi::TypeError::New(env, signature + ": name must be a string and bytes a number");
  const std::string name = info[0].As<Napi::String>().Utf8Value();
  const double requested = info[1].As<Napi::Number>().DoubleValue();
  if (name.empty()) throw Napi::RangeError::New(env, signature + ": name must not be empty");
  if (!(requested >= 1 && requested <= 9007199254740991.0 && std::floor(requested) == requested))
    throw Napi::RangeError::New(env, signature + ": bytes must be a positive integer, got " + std::to_string(requested));
  const size_t bytes = static_cast<size_t>(requested);
  void* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(shared_regions_mutex);
    auto found = shared_regions.find(name);
    if (found != shared_regions.end()) {
      if (found->second.bytes != bytes)
        throw Napi::RangeError::New(env, signature + ": '" + name + "' holds " + std::to_string(found->second.bytes) + " bytes, not " +
                                             std::to_string(bytes));
      data = found->second.data;
      found->second.references += 1;
    } else {
      data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (data == MAP_FAILED) throw Napi::Error::New(env, signature + ": mapping " + std::to_string(bytes) + " bytes failed: " + std::strerror(errno));
      shared_regions.emplace(name, SharedRegion{data, bytes, 1});
    }
  }
  // Not Napi::ArrayBuffer::New: napi_create_external_arraybuffer goes through node::Buffer, which refuses more than
  // 4 GiB (buffer.constants.MAX_LENGTH) and runs the finalizer on its way out, where a 1.2B-parameter model's weights
  // are 4.9 GB. V8's own external backing store has no such limit (as a plain `new ArrayBuffer(5e9)` has none). A
  // napi_value is V8's Local handle (Node's js_native_api_v8.h, JsValueFromV8LocalValue): this one lives in the
  // callback's handle scope, as any value N-API makes there.
  std::shared_ptr<v8::BackingStore> store = v8::ArrayBuffer::NewBackingStore(data, bytes, release_shared_region, new std::string(name));
  v8::Local<v8::ArrayBuffer> buffer = v8::ArrayBuffer::New(v8::Isolate::GetCurrent(), std::move(store));
  return Napi::Value(env, reinterpret_cast<napi_value>(*buffer));
}

Napi::Value SetMmapThreshold(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "setMmapThreshold(bytes): bytes must be a number");
  const double bytes = info[0].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 4096 && bytes <= 33554432)) throw Napi::RangeError::New(env, "setMmapThreshold(bytes): bytes must be in [4096, 33554432]");
#if defined(__GLIBC__)
  return Napi::Boolean::New(env, mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) == 1);
#else
  return Napi::Boolean::New(env, false);
#endif
}

// glibc returns the free memory at the top of a heap to the OS once it
// exceeds the trim threshold (128 KiB at start; twice the dynamic mmap
// threshold later), so a step that frees and then reallocates its activations
// pays a page fault for every 4 KiB again. A threshold above the step's
// largest free keeps that memory for the next allocation.
Napi::Value SetTrimThreshold(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "setTrimThreshold(bytes): bytes must be a number");
  const double bytes = info[0].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 4096 && bytes <= 2147483647)) throw Napi::RangeError::New(env, "setTrimThreshold(bytes): bytes must be in [4096, 2147483647]");
#if defined(__GLIBC__)
  return Napi::Boolean::New(env, mallopt(M_TRIM_THRESHOLD, static_cast<int>(bytes)) == 1);
#else
  return Napi::Boolean::New(env, false);
#endif
}

// What a JavaScript value is, for error messages: "a Float64Array", "an Array", "a number", "undefined".
std::string describe(const Napi::Value& v) {
  if (v.IsUndefined()) return "undefined";
  if (v.IsNull()) return "null";
  if (v.IsObject()) {
    Napi::Value ctor = v.As<Napi::Object>().Get("constructor");
    if (ctor.IsFunction()) {
      Napi::Value name = ctor.As<Napi::Object>().Get("name");
      const std::string n = name.IsString() ? name.As<Napi::String>().Utf8Value() : "";
      if (!n.empty()) return (std::string("AEIOU").find(n[0]) == std::string::npos ? "a " : "an ") + n;
    }
    return "an object";
  }
  if (v.IsNumber()) return "a number";
  if (v.IsString()) return "a string";
  if (v.IsBoolean()) return "a boolean";
  return "a " + std::string(v.IsBigInt() ? "bigint" : v.IsSymbol() ? "symbol" : "value");
}

// Argument `name` of `signature` as a Float32Array; a TypeError naming what it is otherwise.
Napi::Float32Array float32_argument(const Napi::Value& v, const std::string& signature, const char* name) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    throw Napi::TypeError::New(v.Env(), signature + ": " + name + " must be a Float32Array, got " + describe(v));
  }
  return v.As<Napi::Float32Array>();
}

// The optional isa argument of the CPU kernels' functions (default "auto"): throws for an unknown name or one this processor
// cannot run.
CpuIsa isa_argument(const Napi::Value& v, const std::string& signature) {
  Napi::Env env = v.Env();
  std::string isa_name = "auto";
  if (!v.IsUndefined()) {
    if (!v.IsString()) throw Napi::TypeError::New(env, signature + ": isa must be a string, got " + describe(v));
    isa_name = v.As<Napi::String>().Utf8Value();
  }
  CpuIsa isa;
  if (!parse_cpu_isa(isa_name.c_str(), &isa)) {
    throw Napi::RangeError::New(env, signature + ": isa must be auto, avx512, avx2 or portable, got '" + isa_name + "'");
  }
  if (!cpu_isa_name(isa)) throw Napi::Error::New(env, signature + ": this processor cannot run the '" + isa_name + "' CPU kernels");
  return isa;
}

// A Float32Array argument and its element count.
struct SizedArray {
  const char* name;
  float* data;
  uint64_t length;
  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(data); }
  uintptr_t end() const { return begin() + length * sizeof(float); }
  bool overlaps(const SizedArray& o) const { return begin() < o.end() && o.begin() < end(); }
};

// Checks the elementwise functions' arguments (GELU, addInto): `names.size()` Float32Arrays of one
// length (the last is the output, which may be an input but not partly
// overlap one), then an optional isa name.
std::vector<SizedArray> elementwise_arguments(const Napi::CallbackInfo& info, const std::string& signature,
                                       const std::vector<const char*>& names, CpuIsa* isa) {
  Napi::Env env = info.Env();
  std::vector<SizedArray> arrays;
  for (size_t i = 0; i < names.size(); ++i) {
    Napi::Float32Array a = float32_argument(info[i], signature, names[i]);
    arrays.push_back({names[i], a.Data(), a.ElementLength()});
    if (arrays[i].length != arrays[0].length) {
      throw Napi::RangeError::New(env, signature + ": " + names[i] + " has " + std::to_string(arrays[i].length) +
                                           " elements but " + names[0] + " has " + std::to_string(arrays[0].length));
    }
  }
  const SizedArray& out = arrays.back();
  for (size_t i = 0; i + 1 < arrays.size(); ++i) {
    if (arrays[i].data != out.data && out.overlaps(arrays[i])) {
      throw Napi::RangeError::New(env, signature + ": " + out.name + " partly overlaps " + arrays[i].name +
                                           " (the output may be an input array, or separate from it)");
    }
  }
  *isa = isa_argument(info[names.size()], signature);
  return arrays;
}

Napi::Value GeluForward(const Napi::CallbackInfo& info) {
  CpuIsa isa;
  const auto a = elementwise_arguments(info, "geluForward(x, y, isa?)", {"x", "y"}, &isa);
  gelu_forward_cpu(a[0].data, a[1].data, static_cast<int64_t>(a[0].length), isa);
  return info.Env().Undefined();
}

Napi::Value GeluBackward(const Napi::CallbackInfo& info) {
  CpuIsa isa;
  const auto a = elementwise_arguments(info, "geluBackward(x, dy, dx, isa?)", {"x", "dy", "dx"}, &isa);
  gelu_backward_cpu(a[0].data, a[1].data, a[2].data, static_cast<int64_t>(a[0].length), isa);
  return info.Env().Undefined();
}

// addInto(term, target, isa?): target += term elementwise, in place (target
// may be term itself), synchronously on the calling thread.
Napi::Value AddInto(const Napi::CallbackInfo& info) {
  CpuIsa isa;
  const auto a = elementwise_arguments(info, "addInto(term, target, isa?)", {"term", "target"}, &isa);
  add_into_cpu(a[1].data, a[0].data, static_cast<int64_t>(a[0].length), isa);
  return info.Env().Undefined();
}

// Argument `name` of `signature` as an integer of at least `min` (0 or 1), up
// to 2^53 - 1; a TypeError naming what it is otherwise.
int64_t integer_argument(const Napi::Value& v, const std::string& signature, const char* name, int64_t min) {
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1.0;
  if (!(d >= static_cast<double>(min)) || d != static_cast<double>(static_cast<int64_t>(d)) || d > 9007199254740991.0) {
    throw Napi::TypeError::New(v.Env(), signature + ": " + name + " must be a " + (min > 0 ? "positive" : "non-negative") +
                                            " integer, got " + (v.IsNumber() ? std::to_string(d) : describe(v)));
  }
  return static_cast<int64_t>(d);
}

// The threads argument of the CPU kernels' functions: a positive integer,
// capped at 1024 (their results do not depend on the thread count; the cap
// only bounds the threads one call starts).
int thread_count(const Napi::Value& v, const std::string& signature) {
  return static_cast<int>(std::min<int64_t>(integer_argument(v, signature, "threads", 1), 1024));
}

// Argument `index` (named `name`) as a Float32Array of `need` elements (`shape` says why); a RangeError otherwise.
SizedArray sized_argument(const Napi::CallbackInfo& info, size_t index, const std::string& signature, const char* name,
                          uint64_t need, const std::string& shape) {
  Napi::Float32Array a = float32_argument(info[index], signature, name);
  if (a.ElementLength() != need) {
    throw Napi::RangeError::New(info.Env(), signature + ": " + name + " has " + std::to_string(a.ElementLength()) +
                                                " elements, " + shape + " = " + std::to_string(need));
  }
  return {name, a.Data(), need};
}

// Outputs must not overlap inputs or each other, except that the input named
// `in_place` may be exactly the first output (the same array).
void expect_disjoint(Napi::Env env, const std::string& signature, const std::vector<SizedArray>& outputs,
                     const std::vector<SizedArray>& inputs, const char* in_place = nullptr) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (const SizedArray& i : inputs) {
      const bool same = in_place && o == 0 && std::strcmp(i.name, in_place) == 0 && i.data == outputs[0].data &&
                        i.length == outputs[0].length;
      if (!same && outputs[o].overlaps(i)) throw Napi::RangeError::New(env, signature + ": " + outputs[o].name + " overlaps " + i.name);
    }
    for (size_t p = o + 1; p < outputs.size(); ++p) {
      if (outputs[o].overlaps(outputs[p])) {
        throw Napi::RangeError::New(env, signature + ": " + outputs[o].name + " overlaps " + outputs[p].name);
      }
    }
  }
}

// The axes of the products' arrays: rows, in and out (arguments 3, 4 and 5).
enum ProductAxis { Rows = 0, In = 1, Out = 2 };

// One array of a product: its name and its two axes.
struct ProductOperand {
  const char* name;
  ProductAxis first, second;
};

// The checked arguments of weightGradient and matmul: (input, input, output,
// rows, in, out, threads, isa?), each array a Float32Array of its axes' size,
// the output overlapping neither input.
struct ProductArguments {
  SizedArray a, b, output;
  int64_t rows, in, out;
  int threads;
  CpuIsa isa;
};

ProductArguments product_arguments(const Napi::CallbackInfo& info, const std::string& signature,
                                   const std::array<ProductOperand, 3>& operands) {
  for (size_t i = 0; i < 3; ++i) float32_argument(info[i], signature, operands[i].name);
  static const char* const axis_names[3] = {"rows", "in", "out"};
  const int64_t axes[3] = {integer_argument(info[3], signature, "rows", 0), integer_argument(info[4], signature, "in", 0),
                           integer_argument(info[5], signature, "out", 0)};
  const int threads = thread_count(info[6], signature);
  const auto sized = [&](size_t i) {
    const ProductOperand& o = operands[i];
    return sized_argument(info, i, signature, o.name, static_cast<uint64_t>(axes[o.first]) * axes[o.second],
                          std::string(axis_names[o.first]) + " * " + axis_names[o.second]);
  };
  const SizedArray a = sized(0), b = sized(1), output = sized(2);
  expect_disjoint(info.Env(), signature, {output}, {a, b});
  return {a, b, output, axes[Rows], axes[In], axes[Out], threads, isa_argument(info[7], signature)};
}

// weightGradient(x, dy, into, rows, in, out, threads, isa?): into += x^T dy
// in place (the weight gradient of y = x w), x [rows, in], dy [rows, out] and
// into [in, out] Float32Arrays, synchronously; `threads` split the columns.
Napi::Value WeightGradient(const Napi::CallbackInfo& info) {
  const ProductArguments p = product_arguments(info, "weightGradient(x, dy, into, rows, in, out, threads, isa?)",
                                               {{{"x", Rows, In}, {"dy", Rows, Out}, {"into", In, Out}}});
  weight_gradient_cpu(p.a.data, p.b.data, p.output.data, p.rows, p.in, p.out, p.threads, p.isa);
  return info.Env().Undefined();
}

// matmul(x, w, y, rows, in, out, threads, isa?): y = x w, x [rows, in], w [in,
// out] and y [rows, out] Float32Arrays, synchronously; `threads` split the
// columns.
Napi::Value Matmul(const Napi::CallbackInfo& info) {
  const ProductArguments p = product_arguments(info, "matmul(x, w, y, rows, in, out, threads, isa?)",
                                               {{{"x", Rows, In}, {"w", In, Out}, {"y", Rows, Out}}});
  matmul_cpu(p.a.data, p.b.data, p.output.data, p.rows, p.in, p.out, p.threads, p.isa);
  return info.Env().Undefined();
}

// Argument `name` of `signature` as a finite number; a TypeError naming what it is otherwise.
double finite_argument(const Napi::Value& v, const std::string& signature, const char* name) {
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : NAN;
  if (!std::isfinite(d)) {
    throw Napi::TypeError::New(v.Env(), signature + ": " + name + " must be a finite number, got " +
                                            (v.IsNumber() ? std::to_string(d) : describe(v)));
  }
  return d;
}

// adamwUpdate(params, grads, m, v, decayMask, beta1, beta2, eps, lr, decay, c1, c2, isa?):
// one AdamW update of n elements in place (params, m, v; Float32Arrays of one
// length n, grads too, decayMask a Uint8Array of n or null), in float64 per
// element as @ulysses/training's AdamW.update (see cpu/adamw.cc), with the
// loop compiled for `isa` (the same bits on every one), synchronously on the
// calling thread.
Napi::Value AdamWUpdate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string signature = "adamwUpdate(params, grads, m, v, decayMask, beta1, beta2, eps, lr, decay, c1, c2, isa?)";
  const uint64_t n = float32_argument(info[0], signature, "params").ElementLength();
  const SizedArray params = sized_argument(info, 0, signature, "params", n, "params' length");
  const SizedArray grads = sized_argument(info, 1, signature, "grads", n, "params' length");
  const SizedArray m = sized_argument(info, 2, signature, "m", n, "params' length");
  const SizedArray v = sized_argument(info, 3, signature, "v", n, "params' length");
  expect_disjoint(env, signature, {params, m, v}, {grads});
  const uint8_t* mask = nullptr;
  if (!info[4].IsNull()) {
    if (!info[4].IsTypedArray() || info[4].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      throw Napi::TypeError::New(env, signature + ": decayMask must be a Uint8Array or null, got " + describe(info[4]));
    }
    Napi::Uint8Array a = info[4].As<Napi::Uint8Array>();
    if (a.ElementLength() != n) {
      throw Napi::RangeError::New(env, signature + ": decayMask has " + std::to_string(a.ElementLength()) +
                                           " elements, params' length = " + std::to_string(n));
    }
    mask = a.Data();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(mask), end = begin + n;
    for (const SizedArray& out : {params, m, v}) {
      if (begin < out.end() && out.begin() < end) throw Napi::RangeError::New(env, signature + ": " + out.name + " overlaps decayMask");
    }
  }
  AdamWArgs args{params.data, grads.data, m.data, v.data, mask, static_cast<int64_t>(n),
                 finite_argument(info[5], signature, "beta1"), finite_argument(info[6], signature, "beta2"),
                 finite_argument(info[7], signature, "eps"), finite_argument(info[8], signature, "lr"),
                 finite_argument(info[9], signature, "decay"), finite_argument(info[10], signature, "c1"),
                 finite_argument(info[11], signature, "c2")};
  adamw_update_cpu(args, isa_argument(info[12], signature));
  return env.Undefined();
}

// rope(x, cos, sin, y, tokens, heads, headDim, tableRows, backward, threads, isa?):
// rotary embedding of x [tokens, heads, headDim] by the tables [tableRows,
// headDim] (row token % tableRows; tokens a multiple of tableRows, headDim
// even), forward or (backward true) its transpose, into y (x itself or
// separate), synchronously; `threads` split the tokens.
Napi::Value Rope(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string signature = "rope(x, cos, sin, y, tokens, heads, headDim, tableRows, backward, threads, isa?)";
  for (size_t i = 0; i < 4; ++i) float32_argument(info[i], signature, i == 0 ? "x" : i == 1 ? "cos" : i == 2 ? "sin" : "y");
  const int64_t tokens = integer_argument(info[4], signature, "tokens", 0);
  const int64_t heads = integer_argument(info[5], signature, "heads", 0);
  const int64_t d = integer_argument(info[6], signature, "headDim", 0);
  const int64_t table_rows = integer_argument(info[7], signature, "tableRows", 1);
  if (d % 2 != 0) throw Napi::RangeError::New(env, signature + ": headDim must be even, got " + std::to_string(d));
  if (tokens % table_rows != 0) {
    throw Napi::RangeError::New(env, signature + ": tokens (" + std::to_string(tokens) + ") must be a multiple of tableRows (" +
                                         std::to_string(table_rows) + ")");
  }
  if (!info[8].IsBoolean()) throw Napi::TypeError::New(env, signature + ": backward must be a boolean, got " + describe(info[8]));
  const uint64_t n = static_cast<uint64_t>(tokens) * heads * d, table = static_cast<uint64_t>(table_rows) * d;
  const SizedArray x = sized_argument(info, 0, signature, "x", n, "tokens * heads * headDim");
  const SizedArray cos = sized_argument(info, 1, signature, "cos", table, "tableRows * headDim");
  const SizedArray sin = sized_argument(info, 2, signature, "sin", table, "tableRows * headDim");
  const SizedArray y = sized_argument(info, 3, signature, "y", n, "tokens * heads * headDim");
  expect_disjoint(env, signature, {y}, {x, cos, sin}, "x");
  const int threads = thread_count(info[9], signature);
  const CpuIsa isa = isa_argument(info[10], signature);
  rope_cpu(x.data, cos.data, sin.data, y.data, tokens, heads, d, table_rows, info[8].As<Napi::Boolean>().Value(), threads, isa);
  return env.Undefined();
}

// The LayerNorm functions' arrays, in argument order from 0: each is
// [rows, h], [h] or [rows]. Checks their types, then rows and h (the two
// integers after them), then their sizes.
enum class RowShape { RowsByH, H, Rows };
struct RowArgs {
  std::vector<SizedArray> arrays;
  int64_t rows, h;
};
RowArgs row_arguments(const Napi::CallbackInfo& info, const std::string& signature,
                      const std::vector<std::pair<const char*, RowShape>>& spec) {
  for (size_t i = 0; i < spec.size(); ++i) float32_argument(info[i], signature, spec[i].first);
  RowArgs r;
  r.rows = integer_argument(info[spec.size()], signature, "rows", 0);
  r.h = integer_argument(info[spec.size() + 1], signature, "h", 0);
  for (size_t i = 0; i < spec.size(); ++i) {
    const RowShape k = spec[i].second;
    const uint64_t need = k == RowShape::RowsByH ? static_cast<uint64_t>(r.rows) * r.h : k == RowShape::H ? r.h : r.rows;
    r.arrays.push_back(sized_argument(info, i, signature, spec[i].first, need,
                                      k == RowShape::RowsByH ? "rows * h" : k == RowShape::H ? "h" : "rows"));
  }
  return r;
}

// layerNormForward(x, gamma, beta, y, mean, rstd, rows, h, eps, threads, isa?):
// LayerNorm of x [rows, h] into y [rows, h], mean and rstd [rows], synchronously; `threads` split the rows.
Napi::Value LayerNormForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string signature = "layerNormForward(x, gamma, beta, y, mean, rstd, rows, h, eps, threads, isa?)";
  using S = RowShape;
  const RowArgs r = row_arguments(
      info, signature, {{"x", S::RowsByH}, {"gamma", S::H}, {"beta", S::H}, {"y", S::RowsByH}, {"mean", S::Rows}, {"rstd", S::Rows}});
  const std::vector<SizedArray>& a = r.arrays;
  const Napi::Value eps = info[8];
  if (!eps.IsNumber() || !(eps.As<Napi::Number>().DoubleValue() > 0)) {
    throw Napi::TypeError::New(env, signature + ": eps must be a positive number, got " +
                                        (eps.IsNumber() ? std::to_string(eps.As<Napi::Number>().DoubleValue()) : describe(eps)));
  }
  expect_disjoint(env, signature, {a[3], a[4], a[5]}, {a[0], a[1], a[2]});
  const int threads = thread_count(info[9], signature);
  const CpuIsa isa = isa_argument(info[10], signature);
  layer_norm_forward_cpu(a[0].data, a[1].data, a[2].data, static_cast<float>(eps.As<Napi::Number>().DoubleValue()), a[3].data,
                         a[4].data, a[5].data, r.rows, r.h, threads, isa);
  return env.Undefined();
}

// layerNormBackward(x, gamma, mean, rstd, dy, dx, dGamma, dBeta, rows, h, threads, isa?):
// its backward into dx [rows, h], dGamma and dBeta [h] (overwritten), synchronously.
Napi::Value LayerNormBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string signature = "layerNormBackward(x, gamma, mean, rstd, dy, dx, dGamma, dBeta, rows, h, threads, isa?)";
  using S = RowShape;
  const RowArgs r = row_arguments(info, signature,
                                  {{"x", S::RowsByH}, {"gamma", S::H}, {"mean", S::Rows}, {"rstd", S::Rows}, {"dy", S::RowsByH},
                                   {"dx", S::RowsByH}, {"dGamma", S::H}, {"dBeta", S::H}});
  const std::vector<SizedArray>& a = r.arrays;
  expect_disjoint(env, signature, {a[5], a[6], a[7]}, {a[0], a[1], a[2], a[3], a[4]});
  const int threads = thread_count(info[10], signature);
  const CpuIsa isa = isa_argument(info[11], signature);
  layer_norm_backward_cpu(a[0].data, a[1].data, a[2].data, a[3].data, a[4].data, a[5].data, a[6].data, a[7].data, r.rows,
                          r.h, threads, isa);
  return env.Undefined();
}

// An Int32Array argument of `need` elements; a TypeError or RangeError naming it otherwise.
Napi::Int32Array int32_argument(const Napi::CallbackInfo& info, size_t index, const std::string& signature, const char* name,
                                uint64_t need, const std::string& shape) {
  const Napi::Value v = info[index];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    throw Napi::TypeError::New(v.Env(), signature + ": " + name + " must be an Int32Array, got " + describe(v));
  }
  Napi::Int32Array a = v.As<Napi::Int32Array>();
  if (a.ElementLength() != need) {
    throw Napi::RangeError::New(v.Env(), signature + ": " + name + " has " + std::to_string(a.ElementLength()) + " elements, " +
                                             shape + " = " + std::to_string(need));
  }
  return a;
}

// crossEntropy(logits, labels, rowLoss, argmax, rows, vocab, ignoreIndex, gradScale, threads, isa?):
// each row of logits [rows, vocab] against its label (Int32Array [rows], each
// in [0, vocab) or ignoreIndex): rowLoss [rows] gets logsumexp(row) - row[label],
// argmax (Int32Array [rows]) the first index of the row's maximum (-1 when
// ignored); with gradScale a number (not null), logits is overwritten in
// place by gradScale (softmax - onehot(label)). Synchronously; `threads` split the rows.
Napi::Value CrossEntropy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const std::string signature = "crossEntropy(logits, labels, rowLoss, argmax, rows, vocab, ignoreIndex, gradScale, threads, isa?)";
  const int64_t rows = integer_argument(info[4], signature, "rows", 0);
  const int64_t vocab = integer_argument(info[5], signature, "vocab", 1);
  const SizedArray logits = sized_argument(info, 0, signature, "logits", static_cast<uint64_t>(rows) * vocab, "rows * vocab");
  Napi::Int32Array labels = int32_argument(info, 1, signature, "labels", static_cast<uint64_t>(rows), "rows");
  const SizedArray row_loss = sized_argument(info, 2, signature, "rowLoss", static_cast<uint64_t>(rows), "rows");
  Napi::Int32Array argmax = int32_argument(info, 3, signature, "argmax", static_cast<uint64_t>(rows), "rows");
  if (!info[6].IsNumber() || info[6].As<Napi::Number>().DoubleValue() != static_cast<double>(info[6].As<Napi::Number>().Int32Value())) {
    throw Napi::TypeError::New(env, signature + ": ignoreIndex must be a 32-bit integer, got " + describe(info[6]));
  }
  const int32_t ignore = info[6].As<Napi::Number>().Int32Value();
  const bool has_grad = !info[7].IsNull();
  const float grad_scale = has_grad ? static_cast<float>(finite_argument(info[7], signature, "gradScale")) : 0.0f;
  const int32_t* label = labels.Data();
  for (int64_t r = 0; r < rows; ++r) {
    if (label[r] != ignore && (label[r] < 0 || label[r] >= vocab)) {
      throw Napi::RangeError::New(env, signature + ": labels[" + std::to_string(r) + "] = " + std::to_string(label[r]) +
                                           " is outside [0, " + std::to_string(vocab) + ") and is not ignoreIndex " + std::to_string(ignore));
    }
  }
  const SizedArray label_bytes{"labels", reinterpret_cast<float*>(labels.Data()), static_cast<uint64_t>(rows)};
  const SizedArray argmax_bytes{"argmax", reinterpret_cast<float*>(argmax.Data()), static_cast<uint64_t>(rows)};
  expect_disjoint(env, signature, {logits, row_loss, argmax_bytes}, {label_bytes}, nullptr);
  const int threads = thread_count(info[8], signature);
  const CpuIsa isa = isa_argument(info[9], signature);
  cross_entropy_cpu(logits.data, label, row_loss.data, argmax.Data(), rows, vocab, ignore, has_grad, grad_scale, threads, isa);
  return env.Undefined();
}

Napi::Object Module(Napi::Env env, Napi::Object exports) {
  exports.Set("init", Napi::Function::New(env, Init, "init"));
  exports.Set("sharedMemory", Napi::Function::New(env, SharedMemory, "sharedMemory"));
  exports.Set("setMmapThreshold", Napi::Function::New(env, SetMmapThreshold, "setMmapThreshold"));
  exports.Set("setTrimThreshold", Napi::Function::New(env, SetTrimThreshold, "setTrimThreshold"));
  exports.Set("geluForward", Napi::Function::New(env, GeluForward, "geluForward"));
  exports.Set("geluBackward", Napi::Function::New(env, GeluBackward, "geluBackward"));
  exports.Set("adamwUpdate", Napi::Function::New(env, AdamWUpdate, "adamwUpdate"));
  exports.Set("addInto", Napi::Function::New(env, AddInto, "addInto"));
  exports.Set("weightGradient", Napi::Function::New(env, WeightGradient, "weightGradient"));
  exports.Set("matmul", Napi::Function::New(env, Matmul, "matmul"));
  exports.Set("crossEntropy", Napi::Function::New(env, CrossEntropy, "crossEntropy"));
  exports.Set("rope", Napi::Function::New(env, Rope, "rope"));
  exports.Set("layerNormForward", Napi::Function::New(env, LayerNormForward, "layerNormForward"));
  exports.Set("layerNormBackward", Napi::Function::New(env, LayerNormBackward, "layerNormBackward"));
  exports.Set("Runtime", Runtime::Define(env));
  exports.Set("Session", Session::Define(env));
  return exports;
}

}  // namespace
}  // namespace ulysses

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return ulysses::Module(env, exports); }

NODE_API_MODULE(ulysses_fused_attention, InitModule)
