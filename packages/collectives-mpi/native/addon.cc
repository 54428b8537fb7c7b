// ulysses_mpi: module entry. MPI lifetime (init with MPI_THREAD_MULTIPLE,
// finalize, abort), lane management and argument helpers; the operations live
// in comms.cc and collective-ops.cc. Policy (when to finalize or abort, what
// to validate across ranks) belongs to the TypeScript side.
#include <cstdio>
#include <limits>

#include "common.h"

namespace ulysses_mpi {

uint32_t ArgLane(const Napi::CallbackInfo& info, size_t index) {
  return static_cast<uint32_t>(ArgInt(info, index, "lane"));
}

int ArgInt(const Napi::CallbackInfo& info, size_t index, const char* what) {
  Napi::Value value = info[index];
  if (!value.IsNumber()) throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a number");
  double number = value.As<Napi::Number>().DoubleValue();
  if (number != static_cast<double>(static_cast<int64_t>(number)) || number < std::numeric_limits<int>::min() ||
      number > std::numeric_limits<int>::max()) {
    throw Napi::RangeError::New(info.Env(), std::string(what) + " must be a 32-bit integer, got " + std::to_string(number));
  }
  return static_cast<int>(number);
}

std::string ArgString(const Napi::CallbackInfo& info, size_t index, const char* what) {
  if (!info[index].IsString()) throw Napi::TypeError::New(info.Env(), std::string(what) + " must be a string");
  return info[index].As<Napi::String>().Utf8Value();
}

std::vector<int> ArgIntArray(const Napi::CallbackInfo& info, size_t index, const char* what, size_t expected) {
  Napi::Env env = info.Env();
  if (!info[index].IsArray()) throw Napi::TypeError::New(env, std::string(what) + " must be an array");
  Napi::Array array = info[index].As<Napi::Array>();
  if (array.Length() != expected) {
    throw Napi::RangeError::New(env, std::string(what) + " has " + std::to_string(array.Length()) + " entries, expected " + std::to_string(expected));
  }
  std::vector<int> out(expected);
  for (uint32_t i = 0; i < array.Length(); ++i) {
    Napi::Value entry = array.Get(i);
    double number = entry.IsNumber() ? entry.As<Napi::Number>().DoubleValue() : -1;
    if (number < 0 || number > std::numeric_limits<int>::max() || number != static_cast<double>(static_cast<int64_t>(number))) {
      throw Napi::RangeError::New(env, std::string(what) + "[" + std::to_string(i) + "] must be an integer in [0, 2^31)");
    }
    out[i] = static_cast<int>(number);
  }
  return out;
}

OpStart::OpStart(const Napi::CallbackInfo& info)
    : env(info.Env()), lane(ArgLane(info, 0)), comm(GetComm(info.Env(), ArgInt(info, 1, "comm"))), job(std::make_unique<Job>(info.Env())) {}

Napi::Value OpStart::Queue() { return Submit(env, lane, job.release()); }

namespace {

bool initialized = false;

const char* ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "unknown";
  }
}

// init() -> { rank, size, threadLevel, threadMultiple, processor, library }; idempotent.
Napi::Value Init(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int already = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) throw Napi::Error::New(env, "MPI was already finalized in this process and cannot be initialised again");
  MPI_Initialized(&already);
  int provided = MPI_THREAD_MULTIPLE;
  if (!already) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) throw Napi::Error::New(env, "MPI_Init_thread failed: " + MpiErrorString(rc));
  } else {
    MPI_Query_thread(&provided);
  }
  if (!initialized) {
    AddComm(MPI_COMM_WORLD);  // id 0
    CreateHalfOps();
    InitDispatcher(env);
    initialized = true;
  }
  int rank = 0, size = 0, nameLength = 0, versionLength = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME];
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_processor_name(name, &nameLength);
  MPI_Get_library_version(version, &versionLength);
  while (versionLength > 0 && (version[versionLength - 1] == '\0' || version[versionLength - 1] == '\n')) --versionLength;
  Napi::Object out = Napi::Object::New(env);
  out.Set("rank", rank);
  out.Set("size", size);
  out.Set("threadLevel", ThreadLevelName(provided));
  out.Set("threadMultiple", provided == MPI_THREAD_MULTIPLE);
  out.Set("processor", std::string(name, static_cast<size_t>(nameLength)));
  out.Set("library", std::string(version, static_cast<size_t>(versionLength)));
  return out;
}

// finalize(): joins the lanes, frees communicators and ops, calls MPI_Finalize.
// Blocks until every rank finalizes (it is collective in practice).
Napi::Value Finalize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return env.Undefined();
  if (PendingJobs() > 0) {
    throw Napi::Error::New(env, "cannot finalize MPI with " + std::to_string(PendingJobs()) + " operations still running");
  }
  ShutdownLanes(env);
  FreeAllComms();
  FreeHalfOps();
  int rc = MPI_Finalize();
  initialized = false;
  if (rc != MPI_SUCCESS) throw Napi::Error::New(env, "MPI_Finalize failed: " + MpiErrorString(rc));
  return env.Undefined();
}

// abort(code, message): prints the message to stderr and aborts the whole job.
Napi::Value Abort(const Napi::CallbackInfo& info) {
  int code = ArgInt(info, 0, "code");
  std::string message = ArgString(info, 1, "message");
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code == 0 ? 1 : code);
  return info.Env().Undefined();
}

Napi::Value State(const Napi::CallbackInfo& info) {
  int started = 0, finalized = 0;
  MPI_Initialized(&started);
  MPI_Finalized(&finalized);
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("initialized", started != 0);
  out.Set("finalized", finalized != 0);
  out.Set("pendingJobs", PendingJobs());
  return out;
}

Napi::Value NewLane(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), CreateLane()); }

Napi::Value DropLane(const Napi::CallbackInfo& info) {
  DestroyLane(ArgLane(info, 0));
  return info.Env().Undefined();
}

// abandonLane(lane): the lane's running and queued jobs stop keeping the process alive.
Napi::Value GiveUpLane(const Napi::CallbackInfo& info) {
  AbandonLane(info.Env(), ArgLane(info, 0));
  return info.Env().Undefined();
}

Napi::Object Register(Napi::Env env, Napi::Object exports) {
  exports.Set("abandonLane", Napi::Function::New(env, GiveUpLane, "abandonLane"));
  exports.Set("init", Napi::Function::New(env, Init, "init"));
  exports.Set("finalize", Napi::Function::New(env, Finalize, "finalize"));
  exports.Set("abort", Napi::Function::New(env, Abort, "abort"));
  exports.Set("state", Napi::Function::New(env, State, "state"));
  exports.Set("createLane", Napi::Function::New(env, NewLane, "createLane"));
  exports.Set("destroyLane", Napi::Function::New(env, DropLane, "destroyLane"));
  RegisterCommOps(env, exports);
  RegisterCollectiveOps(env, exports);
  return exports;
}

}  // namespace

}  // namespace ulysses_mpi

static Napi::Object RegisterModule(Napi::Env env, Napi::Object exports) { return ulysses_mpi::Register(env, exports); }

NODE_API_MODULE(ulysses_mpi, RegisterModule)
