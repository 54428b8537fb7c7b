// See custom-ops.h. This file reads attributes and tensor shapes, validates
// them (errors name the offending shapes), asks ONNX Runtime for the outputs
// and hands raw pointers to the CPU (or CUDA) kernels.
#include "custom-ops.h"

#include <climits>
#include <cmath>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/attention-cpu.h"
#include "ort-api.h"
#ifdef ULYSSES_WITH_CUDA
#include "cuda/attention-cuda.h"
#endif

namespace ulysses {
namespace {

struct InvalidArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct FlashKernel {
  const FlashOp* op;
  const OrtApi* api;
  bool causal;
  bool has_scale;
  float scale;
};

const FlashOp* self(const OrtCustomOp* op) { return reinterpret_cast<const FlashOp*>(op); }

std::string shape_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::vector<int64_t> input_dims(const OrtApi* api, OrtKernelContext* ctx, size_t index) {
  const OrtValue* value = nullptr;
  check_status(api, api->KernelContext_GetInput(ctx, index, &value), "KernelContext_GetInput");
  OrtTensorTypeAndShapeInfo* info = nullptr;
  check_status(api, api->GetTensorTypeAndShape(value, &info), "GetTensorTypeAndShape");
  size_t count = 0;
  OrtStatus* status = api->GetDimensionsCount(info, &count);
  std::vector<int64_t> dims(count);
  if (!status) status = api->GetDimensions(info, dims.data(), count);
  api->ReleaseTensorTypeAndShapeInfo(info);
  check_status(api, status, "GetDimensions");
  return dims;
}

const float* input_data(const OrtApi* api, OrtKernelContext* ctx, size_t index) {
  const OrtValue* value = nullptr;
  check_status(api, api->KernelContext_GetInput(ctx, index, &value), "KernelContext_GetInput");
  void* data = nullptr;
  check_status(api, api->GetTensorMutableData(const_cast<OrtValue*>(value), &data), "GetTensorMutableData");
  return static_cast<const float*>(data);
}

// The input at `index`, or nullptr when the node leaves that optional input out.
const OrtValue* optional_input(const OrtApi* api, OrtKernelContext* ctx, size_t index) {
  size_t count = 0;
  check_status(api, api->KernelContext_GetInputCount(ctx, &count), "KernelContext_GetInputCount");
  if (index >= count) return nullptr;
  const OrtValue* value = nullptr;
  check_status(api, api->KernelContext_GetInput(ctx, index, &value), "KernelContext_GetInput");
  return value;
}

float* output_data(const OrtApi* api, OrtKernelContext* ctx, size_t index, const std::vector<int64_t>& dims) {
  OrtValue* value = nullptr;
  check_status(api, api->KernelContext_GetOutput(ctx, index, dims.data(), dims.size(), &value), "KernelContext_GetOutput");
  void* data = nullptr;
  check_status(api, api->GetTensorMutableData(value, &data), "GetTensorMutableData");
  return static_cast<float*>(data);
}

// Validates q, k, v (and, for the gradient, out, dout, lse) and returns the sizes.
AttentionProblem read_problem(const FlashKernel& kernel, OrtKernelContext* ctx) {
  const OrtApi* api = kernel.api;
  const char* name = kernel.op->kind == OpKind::Forward ? kForwardOpName : kBackwardOpName;
  const auto q = input_dims(api, ctx, 0), k = input_dims(api, ctx, 1), v = input_dims(api, ctx, 2);
  if (q.size() != 4 || k.size() != 4) {
    throw InvalidArgument(std::string(name) + ": q and k must be [batch, seq, heads, headDim], got q " + shape_string(q) +
                          " and k " + shape_string(k));
  }
  if (k[0] != q[0] || k[3] != q[3] || v != k) {
    throw InvalidArgument(std::string(name) + ": k " + shape_string(k) + " and v " + shape_string(v) +
                          " must agree with q " + shape_string(q) + " in batch and headDim, and with each other");
  }
  if (k[2] < 1 || q[2] % k[2] != 0) {
    throw InvalidArgument(std::string(name) + ": heads (" + std::to_string(q[2]) + ") must be a multiple of kvHeads (" +
                          std::to_string(k[2]) + ")");
  }
  AttentionProblem p;
  p.batch = q[0];
  p.seq_q = q[1];
  p.seq_k = k[1];
  p.heads = q[2];
  p.kv_heads = k[2];
  p.head_dim = q[3];
  p.causal = kernel.causal;
  p.scale = kernel.has_scale ? kernel.scale : (p.head_dim > 0 ? 1.0f / std::sqrt(static_cast<float>(p.head_dim)) : 1.0f);
  if (kernel.op->kind == OpKind::Backward) {
    const auto out = input_dims(api, ctx, 3), dout = input_dims(api, ctx, 4), lse = input_dims(api, ctx, 5);
    const std::vector<int64_t> want_lse = {p.batch, p.heads, p.seq_q};
    if (out != q || dout != q || lse != want_lse) {
      throw InvalidArgument(std::string(name) + ": out " + shape_string(out) + " and dout " + shape_string(dout) +
                            " must equal q " + shape_string(q) + ", and lse " + shape_string(lse) + " must be " +
                            shape_string(want_lse));
    }
  }
  return p;
}

// Index of the first document input: after q, k, v (forward) or q, k, v,
// out, dout, lse (gradient).
size_t documents_index(OpKind kind) { return kind == OpKind::Forward ? 3 : 6; }

struct Documents {
  const int32_t* q = nullptr;  // [batch, seq_q], or nullptr: no document masking
  const int32_t* k = nullptr;  // [batch, seq_k]
};

// The optional document inputs: both or neither, int32 [batch, seq_q] and
// [batch, seq_k]. In host memory (the CPU op) the ids are checked to never
// decrease along a row; the CUDA op's are on the device and trusted (the
// TypeScript wrapper checks them).
Documents read_documents(const FlashKernel& kernel, OrtKernelContext* ctx, const AttentionProblem& p) {
  const OrtApi* api = kernel.api;
  const char* name = kernel.op->kind == OpKind::Forward ? kForwardOpName : kBackwardOpName;
  const size_t first = documents_index(kernel.op->kind);
  const OrtValue* q = optional_input(api, ctx, first);
  const OrtValue* k = optional_input(api, ctx, first + 1);
  if (!q && !k) return {};
  if (!q || !k) throw InvalidArgument(std::string(name) + ": q_documents and k_documents must be given together");
  const auto qdims = input_dims(api, ctx, first), kdims = input_dims(api, ctx, first + 1);
  const std::vector<int64_t> want_q = {p.batch, p.seq_q}, want_k = {p.batch, p.seq_k};
  if (qdims != want_q || kdims != want_k) {
    throw InvalidArgument(std::string(name) + ": q_documents " + shape_string(qdims) + " must be " + shape_string(want_q) +
                          " and k_documents " + shape_string(kdims) + " must be " + shape_string(want_k));
  }
  Documents docs;
  docs.q = reinterpret_cast<const int32_t*>(input_data(api, ctx, first));
  docs.k = reinterpret_cast<const int32_t*>(input_data(api, ctx, first + 1));
  static const int32_t none = 0;  // an empty tensor's data may be null
  if (!docs.q) docs.q = &none;
  if (!docs.k) docs.k = &none;
  if (kernel.op->cuda) return docs;
  auto check_sorted = [&](const int32_t* ids, int64_t seq, const char* which) {
    for (int64_t b = 0; b < p.batch; ++b) {
      for (int64_t i = 1; i < seq; ++i) {
        const int32_t before = ids[b * seq + i - 1], here = ids[b * seq + i];
        if (here < before) {
          throw InvalidArgument(std::string(name) + ": " + which + " must never decrease along a batch row, but row " + std::to_string(b) +
                                " has " + std::to_string(before) + " at " + std::to_string(i - 1) + " and " + std::to_string(here) +
                                " at " + std::to_string(i));
        }
      }
    }
  };
  check_sorted(docs.q, p.seq_q, "q_documents");
  check_sorted(docs.k, p.seq_k, "k_documents");
  return docs;
}

void compute(const FlashKernel& kernel, OrtKernelContext* ctx) {
  const OrtApi* api = kernel.api;
  const AttentionProblem p = read_problem(kernel, ctx);
  const Documents docs = read_documents(kernel, ctx, p);
  const std::vector<int64_t> qdims = {p.batch, p.seq_q, p.heads, p.head_dim};
  const std::vector<int64_t> kdims = {p.batch, p.seq_k, p.kv_heads, p.head_dim};
  void* stream = nullptr;
  if (kernel.op->cuda) check_status(api, api->KernelContext_GetGPUComputeStream(ctx, &stream), "KernelContext_GetGPUComputeStream");
  if (kernel.op->kind == OpKind::Forward) {
    ForwardArgs a{p, input_data(api, ctx, 0), input_data(api, ctx, 1), input_data(api, ctx, 2), nullptr, nullptr};
    a.out = output_data(api, ctx, 0, qdims);
    a.lse = output_data(api, ctx, 1, {p.batch, p.heads, p.seq_q});
    a.doc_q = docs.q;
    a.doc_k = docs.k;
#ifdef ULYSSES_WITH_CUDA
    if (kernel.op->cuda) return attention_forward_cuda(a, stream);
#endif
    attention_forward_cpu(a, kernel.op->threads, kernel.op->isa);
  } else {
    BackwardArgs a{p, input_data(api, ctx, 0), input_data(api, ctx, 1), input_data(api, ctx, 2),
                   input_data(api, ctx, 3), input_data(api, ctx, 4), input_data(api, ctx, 5), nullptr, nullptr, nullptr};
    a.dq = output_data(api, ctx, 0, qdims);
    a.dk = output_data(api, ctx, 1, kdims);
    a.dv = output_data(api, ctx, 2, kdims);
    a.doc_q = docs.q;
    a.doc_k = docs.k;
#ifdef ULYSSES_WITH_CUDA
    if (kernel.op->cuda) return attention_backward_cuda(a, stream);
#endif
    attention_backward_cpu(a, kernel.op->threads, kernel.op->isa);
  }
}

// --- OrtCustomOp callbacks --------------------------------------------------

OrtStatusPtr ORT_API_CALL create_kernel(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info, void** out) {
  auto* kernel = new (std::nothrow) FlashKernel{self(op), api, false, false, 0.0f};
  if (!kernel) return api->CreateStatus(ORT_FAIL, "out of memory creating a FlashAttention kernel");
  int64_t causal = 0;
  OrtStatus* status = api->KernelInfoGetAttribute_int64(info, "causal", &causal);
  if (status) {
    api->ReleaseStatus(status);  // absent: not causal
    causal = 0;
  }
  float scale = 0.0f;
  status = api->KernelInfoGetAttribute_float(info, "scale", &scale);
  if (status) {
    api->ReleaseStatus(status);  // absent: 1/sqrt(headDim) at compute time
  } else if (!std::isfinite(scale)) {
    delete kernel;
    return api->CreateStatus(ORT_INVALID_ARGUMENT, ("FlashAttention: scale must be finite, got " + std::to_string(scale)).c_str());
  } else {
    kernel->has_scale = true;
    kernel->scale = scale;
  }
  kernel->causal = causal != 0;
  *out = kernel;
  return nullptr;
}

OrtStatusPtr ORT_API_CALL compute_kernel(void* op_kernel, OrtKernelContext* ctx) {
  const auto* kernel = static_cast<const FlashKernel*>(op_kernel);
  const OrtApi* api = kernel->api;
  try {
    compute(*kernel, ctx);
    return nullptr;
  } catch (const InvalidArgument& e) {
    return api->CreateStatus(ORT_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return api->CreateStatus(ORT_FAIL, "FlashAttention: out of memory for the kernel's scratch buffers");
  } catch (const std::exception& e) {
    return api->CreateStatus(ORT_FAIL, e.what());
  }
}

void ORT_API_CALL destroy_kernel(void* op_kernel) { delete static_cast<FlashKernel*>(op_kernel); }

const char* ORT_API_CALL op_name(const OrtCustomOp* op) {
  return self(op)->kind == OpKind::Forward ? kForwardOpName : kBackwardOpName;
}

const char* ORT_API_CALL op_provider(const OrtCustomOp* op) {
  return self(op)->cuda ? "CUDAExecutionProvider" : "CPUExecutionProvider";
}

// The tensor inputs, then the two optional document inputs.
size_t ORT_API_CALL input_count(const OrtCustomOp* op) { return documents_index(self(op)->kind) + 2; }
size_t ORT_API_CALL output_count(const OrtCustomOp* op) { return self(op)->kind == OpKind::Forward ? 2 : 3; }
bool is_documents(const OrtCustomOp* op, size_t index) { return index >= documents_index(self(op)->kind); }
ONNXTensorElementDataType ORT_API_CALL input_type(const OrtCustomOp* op, size_t index) {
  return is_documents(op, index) ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
ONNXTensorElementDataType ORT_API_CALL float_type(const OrtCustomOp*, size_t) { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
OrtCustomOpInputOutputCharacteristic ORT_API_CALL input_characteristic(const OrtCustomOp* op, size_t index) {
  return is_documents(op, index) ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
}
OrtCustomOpInputOutputCharacteristic ORT_API_CALL required(const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; }
OrtMemType ORT_API_CALL default_memory(const OrtCustomOp*, size_t) { return OrtMemTypeDefault; }
int ORT_API_CALL one(const OrtCustomOp*) { return 1; }
int ORT_API_CALL start_version(const OrtCustomOp*) { return 1; }
int ORT_API_CALL end_version(const OrtCustomOp*) { return INT_MAX; }

}  // namespace

void init_flash_op(FlashOp* op, OpKind kind, bool cuda, int threads, CpuIsa isa) {
  OrtCustomOp& b = op->base;
  b = OrtCustomOp{};
  b.version = kOrtApiVersion;
  b.GetName = &op_name;
  b.GetExecutionProviderType = &op_provider;
  b.GetInputType = &input_type;
  b.GetInputTypeCount = &input_count;
  b.GetOutputType = &float_type;
  b.GetOutputTypeCount = &output_count;
  b.KernelDestroy = &destroy_kernel;
  b.GetInputCharacteristic = &input_characteristic;
  b.GetOutputCharacteristic = &required;
  b.GetInputMemoryType = &default_memory;
  b.GetVariadicInputMinArity = &one;
  b.GetVariadicInputHomogeneity = &one;
  b.GetVariadicOutputMinArity = &one;
  b.GetVariadicOutputHomogeneity = &one;
  b.CreateKernelV2 = &create_kernel;
  b.KernelComputeV2 = &compute_kernel;
  b.GetStartVersion = &start_version;
  b.GetEndVersion = &end_version;
  op->kind = kind;
  op->cuda = cuda;
  op->threads = threads < 1 ? 1 : threads;
  op->isa = isa;
}

bool cuda_compiled() {
#ifdef ULYSSES_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace ulysses
