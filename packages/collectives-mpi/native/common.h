// Shared declarations of the ulysses_mpi addon: jobs and lanes (threads that
// run blocking MPI calls off the JS thread), the communicator table, and the
// dtype/reduction helpers. The TypeScript side decides what runs where; this
// layer only moves bytes and reports MPI errors as strings.
#pragma once

#include <mpi.h>
#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ulysses_mpi {

// JS memory (a TypedArray, possibly on a SharedArrayBuffer) pinned for one job.
struct Span {
  void* data;
  size_t bytes;
};

// One unit of work: `run` executes on a lane thread (blocking MPI calls; it
// returns an error message or ""), then the promise settles on the JS thread.
struct Job {
  explicit Job(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
  // Pins a TypedArray until the job settles; throws a TypeError otherwise.
  Span Pin(Napi::Env env, Napi::Value value, const char* what);

  std::function<std::string(std::vector<char>& scratch)> run;
  // Builds the resolved value on the JS thread (undefined when empty).
  std::function<Napi::Value(Napi::Env)> result;
  std::string error;
  // Set (JS thread) once the TypeScript side gave up on the job (a timeout):
  // it no longer keeps the event loop alive. It still settles if MPI returns.
  bool abandoned = false;
  Napi::Promise::Deferred deferred;
  std::vector<Napi::ObjectReference> pinned;
};

// lanes.cc
void InitDispatcher(Napi::Env env);
void ShutdownLanes(Napi::Env env);
uint32_t CreateLane();
void DestroyLane(uint32_t id);
// Marks the running and queued jobs of `lane` abandoned (JS thread).
void AbandonLane(Napi::Env env, uint32_t id);
// Queues `job` on `lane` (takes ownership); returns its promise.
Napi::Value Submit(Napi::Env env, uint32_t lane, Job* job);
// Jobs submitted and not yet settled (JS thread only).
int PendingJobs();

// comms.cc
int AddComm(MPI_Comm comm);
// Throws a RangeError on the JS thread when `id` names no live communicator.
MPI_Comm GetComm(Napi::Env env, int id);
MPI_Comm TakeComm(int id);
void FreeAllComms();
std::string MpiErrorString(int code);
void RegisterCommOps(Napi::Env env, Napi::Object exports);

// reduce.cc
MPI_Datatype DatatypeOf(Napi::Env env, const std::string& dtype);
size_t BytesPerElement(Napi::Env env, const std::string& dtype);
MPI_Op OpOf(Napi::Env env, const std::string& dtype, const std::string& op);
void CreateHalfOps();
void FreeHalfOps();
// Divides `count` elements of `dtype` by `divisor` (integers truncate toward zero).
void DivideInPlace(void* data, size_t count, const std::string& dtype, int divisor);

// The start of every asynchronous operation: arguments 0 and 1 are the lane
// and the communicator; `job` is queued by Queue().
struct OpStart {
  explicit OpStart(const Napi::CallbackInfo& info);
  Napi::Value Queue();

  Napi::Env env;
  uint32_t lane;
  MPI_Comm comm;
  std::unique_ptr<Job> job;
};

// collective-ops.cc
void RegisterCollectiveOps(Napi::Env env, Napi::Object exports);

// Argument helpers (addon.cc).
uint32_t ArgLane(const Napi::CallbackInfo& info, size_t index);
int ArgInt(const Napi::CallbackInfo& info, size_t index, const char* what);
std::string ArgString(const Napi::CallbackInfo& info, size_t index, const char* what);
std::vector<int> ArgIntArray(const Napi::CallbackInfo& info, size_t index, const char* what, size_t expected);

}  // namespace ulysses_mpi
