// The communicator table: JS holds small integer ids, this file holds the
// MPI_Comm handles. Id 0 is MPI_COMM_WORLD. Every communicator returns errors
// (MPI_ERRORS_RETURN) so a failure becomes a rejected promise with MPI's own
// message instead of an abort inside the library.
#include <mutex>

#include "common.h"

namespace ulysses_mpi {

namespace {

std::mutex commsMutex;
std::vector<MPI_Comm> comms;  // MPI_COMM_NULL marks a freed slot

}  // namespace

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length)) + " (MPI error " + std::to_string(code) + ")";
}

int AddComm(MPI_Comm comm) {
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  std::lock_guard<std::mutex> lock(commsMutex);
  comms.push_back(comm);
  return static_cast<int>(comms.size() - 1);
}

MPI_Comm GetComm(Napi::Env env, int id) {
  std::lock_guard<std::mutex> lock(commsMutex);
  if (id < 0 || static_cast<size_t>(id) >= comms.size() || comms[id] == MPI_COMM_NULL) {
    throw Napi::RangeError::New(env, "no live communicator " + std::to_string(id));
  }
  return comms[id];
}

MPI_Comm TakeComm(int id) {
  std::lock_guard<std::mutex> lock(commsMutex);
  if (id <= 0 || static_cast<size_t>(id) >= comms.size()) return MPI_COMM_NULL;
  MPI_Comm comm = comms[id];
  comms[id] = MPI_COMM_NULL;
  return comm;
}

void FreeAllComms() {
  std::lock_guard<std::mutex> lock(commsMutex);
  for (size_t id = 1; id < comms.size(); ++id) {
    if (comms[id] != MPI_COMM_NULL) MPI_Comm_free(&comms[id]);
  }
  comms.clear();
}

namespace {

// commInfo(comm) -> { rank, size }
Napi::Value CommInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MPI_Comm comm = GetComm(env, ArgInt(info, 0, "comm"));
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  Napi::Object out = Napi::Object::New(env);
  out.Set("rank", rank);
  out.Set("size", size);
  return out;
}

// commSplit(lane, comm, color, key) -> Promise<id | -1>; color < 0 means MPI_UNDEFINED.
Napi::Value CommSplit(const Napi::CallbackInfo& info) {
  OpStart start(info);
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  int color = ArgInt(info, 2, "color");
  int key = ArgInt(info, 3, "key");
  auto created = std::make_shared<int>(-1);
  job->run = [comm, color, key, created](std::vector<char>&) -> std::string {
    MPI_Comm out = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, &out);
    if (rc != MPI_SUCCESS) return "MPI_Comm_split failed: " + MpiErrorString(rc);
    if (out != MPI_COMM_NULL) *created = AddComm(out);
    return "";
  };
  job->result = [created](Napi::Env e) { return Napi::Number::New(e, *created); };
  return start.Queue();
}

// commDup(lane, comm) -> Promise<id>
Napi::Value CommDup(const Napi::CallbackInfo& info) {
  OpStart start(info);
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  auto created = std::make_shared<int>(-1);
  job->run = [comm, created](std::vector<char>&) -> std::string {
    MPI_Comm out = MPI_COMM_NULL;
    int rc = MPI_Comm_dup(comm, &out);
    if (rc != MPI_SUCCESS) return "MPI_Comm_dup failed: " + MpiErrorString(rc);
    *created = AddComm(out);
    return "";
  };
  job->result = [created](Napi::Env e) { return Napi::Number::New(e, *created); };
  return start.Queue();
}

// commFree(lane, comm) -> Promise<void>; freeing the world (0) is a no-op.
Napi::Value CommFree(const Napi::CallbackInfo& info) {
  OpStart start(info);  // validates the id
  int id = ArgInt(info, 1, "comm");
  start.job->run = [id](std::vector<char>&) -> std::string {
    MPI_Comm comm = TakeComm(id);
    if (comm == MPI_COMM_NULL) return "";
    int rc = MPI_Comm_free(&comm);
    return rc == MPI_SUCCESS ? "" : "MPI_Comm_free failed: " + MpiErrorString(rc);
  };
  return start.Queue();
}

}  // namespace

void RegisterCommOps(Napi::Env env, Napi::Object exports) {
  exports.Set("commInfo", Napi::Function::New(env, CommInfo, "commInfo"));
  exports.Set("commSplit", Napi::Function::New(env, CommSplit, "commSplit"));
  exports.Set("commDup", Napi::Function::New(env, CommDup, "commDup"));
  exports.Set("commFree", Napi::Function::New(env, CommFree, "commFree"));
}

}  // namespace ulysses_mpi
