// Lanes: one native thread per lane runs its jobs in submission order, so
// blocking MPI calls never occupy the JS thread or the libuv pool (where a few
// ranks waiting on each other could starve onnxruntime-node's session runs).
// The TypeScript side gives each communicator its own collective lane and each
// (peer, direction) its own point-to-point lane. Completions come back through
// one thread-safe function, referenced only while jobs are pending, so an idle
// addon never keeps the process alive. A job the TypeScript side abandoned (a
// timeout: a peer never joined, so MPI may never return) stops counting, so
// the process can still end; the lane threads are never destroyed at exit
// (the table is leaked on purpose: a static std::thread destructor on a
// thread blocked in MPI would call std::terminate).
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common.h"

namespace ulysses_mpi {

namespace {

struct Lane {
  std::thread thread;
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Job*> queue;
  Job* current = nullptr;  // the job running on the lane thread (under mutex)
  bool stop = false;
  std::vector<char> scratch;  // reused between jobs of this lane (fresh pages are slow)
};

Napi::ThreadSafeFunction completions;
bool dispatcherReady = false;
int pending = 0;  // JS thread only: jobs submitted and not settled
int alive = 0;    // JS thread only: pending jobs not abandoned (they keep the loop alive)
std::mutex lanesMutex;
std::map<uint32_t, std::unique_ptr<Lane>>& lanes = *new std::map<uint32_t, std::unique_ptr<Lane>>();
uint32_t nextLane = 1;

void Settle(Napi::Env env, Napi::Function, Job* job) {
  --pending;
  if (!job->abandoned && --alive == 0) completions.Unref(env);
  if (!job->error.empty()) {
    job->deferred.Reject(Napi::Error::New(env, job->error).Value());
  } else {
    job->deferred.Resolve(job->result ? job->result(env) : env.Undefined());
  }
  delete job;  // releases the pinned buffers
}

void RunLane(Lane* lane) {
  for (;;) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(lane->mutex);
      lane->wake.wait(lock, [lane] { return lane->stop || !lane->queue.empty(); });
      if (lane->queue.empty()) return;  // stop requested and drained
      job = lane->queue.front();
      lane->queue.pop_front();
      lane->current = job;
    }
    try {
      job->error = job->run(lane->scratch);
    } catch (const std::exception& e) {
      job->error = std::string("native error: ") + e.what();
    }
    {
      std::lock_guard<std::mutex> lock(lane->mutex);
      lane->current = nullptr;
    }
    completions.BlockingCall(job, Settle);
  }
}

void StopLane(Lane* lane) {
  {
    std::lock_guard<std::mutex> lock(lane->mutex);
    lane->stop = true;
  }
  lane->wake.notify_all();
  if (lane->thread.joinable()) lane->thread.join();
}

}  // namespace

Span Job::Pin(Napi::Env env, Napi::Value value, const char* what) {
  if (!value.IsTypedArray()) {
    throw Napi::TypeError::New(env, std::string(what) + " must be a TypedArray");
  }
  // napi_get_typedarray_info works for SharedArrayBuffer-backed arrays too
  // (Napi::ArrayBuffer::Data would not).
  napi_typedarray_type type;
  size_t length = 0;
  void* data = nullptr;
  napi_status status = napi_get_typedarray_info(env, value, &type, &length, &data, nullptr, nullptr);
  if (status != napi_ok) throw Napi::Error::New(env, std::string("cannot read ") + what);
  size_t bytes = length * value.As<Napi::TypedArray>().ElementSize();
  pinned.push_back(Napi::Persistent(value.As<Napi::Object>()));
  return Span{data, bytes};
}

void InitDispatcher(Napi::Env env) {
  if (dispatcherReady) return;
  Napi::Function noop = Napi::Function::New(env, [](const Napi::CallbackInfo&) {});
  completions = Napi::ThreadSafeFunction::New(env, noop, "ulysses_mpi_completions", 0, 1);
  completions.Unref(env);
  dispatcherReady = true;
}

void ShutdownLanes(Napi::Env) {
  std::map<uint32_t, std::unique_ptr<Lane>> stopping;
  {
    std::lock_guard<std::mutex> lock(lanesMutex);
    stopping.swap(lanes);
  }
  for (auto& entry : stopping) StopLane(entry.second.get());
  if (dispatcherReady) {
    completions.Release();
    dispatcherReady = false;
  }
}

uint32_t CreateLane() {
  auto lane = std::make_unique<Lane>();
  Lane* raw = lane.get();
  raw->thread = std::thread(RunLane, raw);
  std::lock_guard<std::mutex> lock(lanesMutex);
  uint32_t id = nextLane++;
  lanes.emplace(id, std::move(lane));
  return id;
}

void DestroyLane(uint32_t id) {
  std::unique_ptr<Lane> lane;
  {
    std::lock_guard<std::mutex> lock(lanesMutex);
    auto found = lanes.find(id);
    if (found == lanes.end()) return;
    lane = std::move(found->second);
    lanes.erase(found);
  }
  StopLane(lane.get());
}

Napi::Value Submit(Napi::Env env, uint32_t id, Job* job) {
  Lane* lane = nullptr;
  {
    std::lock_guard<std::mutex> lock(lanesMutex);
    auto found = lanes.find(id);
    if (found != lanes.end()) lane = found->second.get();
  }
  if (lane == nullptr || !dispatcherReady) {
    delete job;
    throw Napi::RangeError::New(env, "no live lane " + std::to_string(id) + " (destroyed, or MPI not initialised)");
  }
  Napi::Value promise = job->deferred.Promise();
  ++pending;
  if (alive++ == 0) completions.Ref(env);
  {
    std::lock_guard<std::mutex> lock(lane->mutex);
    lane->queue.push_back(job);
  }
  lane->wake.notify_one();
  return promise;
}

int PendingJobs() { return pending; }

void AbandonLane(Napi::Env env, uint32_t id) {
  Lane* lane = nullptr;
  {
    std::lock_guard<std::mutex> lock(lanesMutex);
    auto found = lanes.find(id);
    if (found != lanes.end()) lane = found->second.get();
  }
  if (lane == nullptr) return;
  std::lock_guard<std::mutex> lock(lane->mutex);
  auto abandon = [env](Job* job) {
    if (job == nullptr || job->abandoned) return;
    job->abandoned = true;
    if (--alive == 0) completions.Unref(env);
  };
  abandon(lane->current);
  for (Job* job : lane->queue) abandon(job);
}

}  // namespace ulysses_mpi
