// The data operations: each pins its JS buffers, checks them against the
// byte counts (so MPI never reads or writes outside a TypedArray), and queues
// one blocking MPI call on the given lane. Send and receive buffers are
// separate (MPI_IN_PLACE only where the caller asks for it). Arguments were
// validated across ranks by the TypeScript side before any of these runs.
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "common.h"

namespace ulysses_mpi {

namespace {

constexpr size_t kMaxCount = static_cast<size_t>(std::numeric_limits<int>::max());

void CheckCount(Napi::Env env, size_t count, const char* what) {
  if (count > kMaxCount) {
    throw Napi::RangeError::New(env, std::string(what) + " of " + std::to_string(count) + " exceeds MPI's int count limit");
  }
}

void CheckFits(Napi::Env env, const Span& span, size_t bytes, const char* what) {
  if (bytes > span.bytes) {
    throw Napi::RangeError::New(env, std::string(what) + " needs " + std::to_string(bytes) + " bytes but has " + std::to_string(span.bytes));
  }
}

// Every block [displs[i], displs[i] + counts[i]) must lie inside the buffer.
void CheckBlocks(Napi::Env env, const Span& span, const std::vector<int>& counts, const std::vector<int>& displs, const char* what) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0 || displs[i] < 0) throw Napi::RangeError::New(env, std::string(what) + ": negative count or displacement at " + std::to_string(i));
    CheckFits(env, span, static_cast<size_t>(displs[i]) + static_cast<size_t>(counts[i]), what);
  }
}

int SizeOf(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

std::string Failed(const char* call, int rc) { return rc == MPI_SUCCESS ? "" : std::string(call) + " failed: " + MpiErrorString(rc); }

// alltoall(lane, comm, send, recv, bytesPerRank)
Napi::Value AllToAll(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  Span send = job->Pin(env, info[2], "send buffer");
  Span recv = job->Pin(env, info[3], "receive buffer");
  int bytes = ArgInt(info, 4, "bytesPerRank");
  size_t total = static_cast<size_t>(bytes) * static_cast<size_t>(SizeOf(comm));
  CheckFits(env, send, total, "alltoall send buffer");
  CheckFits(env, recv, total, "alltoall receive buffer");
  job->run = [=](std::vector<char>&) { return Failed("MPI_Alltoall", MPI_Alltoall(send.data, bytes, MPI_BYTE, recv.data, bytes, MPI_BYTE, comm)); };
  return start.Queue();
}

// alltoallv(lane, comm, send, sendCounts, sendDispls, recv, recvCounts, recvDispls): bytes
Napi::Value AllToAllV(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  size_t size = static_cast<size_t>(SizeOf(comm));
  Span send = job->Pin(env, info[2], "send buffer");
  auto sendCounts = std::make_shared<std::vector<int>>(ArgIntArray(info, 3, "sendCounts", size));
  auto sendDispls = std::make_shared<std::vector<int>>(ArgIntArray(info, 4, "sendDispls", size));
  Span recv = job->Pin(env, info[5], "receive buffer");
  auto recvCounts = std::make_shared<std::vector<int>>(ArgIntArray(info, 6, "recvCounts", size));
  auto recvDispls = std::make_shared<std::vector<int>>(ArgIntArray(info, 7, "recvDispls", size));
  CheckBlocks(env, send, *sendCounts, *sendDispls, "alltoallv send buffer");
  CheckBlocks(env, recv, *recvCounts, *recvDispls, "alltoallv receive buffer");
  job->run = [=](std::vector<char>&) {
    int rc = MPI_Alltoallv(send.data, sendCounts->data(), sendDispls->data(), MPI_BYTE, recv.data, recvCounts->data(), recvDispls->data(), MPI_BYTE, comm);
    return Failed("MPI_Alltoallv", rc);
  };
  return start.Queue();
}

// allgather(lane, comm, send, recv): every rank contributes send's bytes.
Napi::Value AllGather(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  Span send = job->Pin(env, info[2], "send buffer");
  Span recv = job->Pin(env, info[3], "receive buffer");
  CheckCount(env, send.bytes, "allgather bytes");
  CheckFits(env, recv, send.bytes * static_cast<size_t>(SizeOf(comm)), "allgather receive buffer");
  int bytes = static_cast<int>(send.bytes);
  job->run = [=](std::vector<char>&) { return Failed("MPI_Allgather", MPI_Allgather(send.data, bytes, MPI_BYTE, recv.data, bytes, MPI_BYTE, comm)); };
  return start.Queue();
}

// allgatherv(lane, comm, send, recv, recvCounts, displs): bytes; this rank sends all of send.
Napi::Value AllGatherV(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  size_t size = static_cast<size_t>(SizeOf(comm));
  Span send = job->Pin(env, info[2], "send buffer");
  Span recv = job->Pin(env, info[3], "receive buffer");
  auto counts = std::make_shared<std::vector<int>>(ArgIntArray(info, 4, "recvCounts", size));
  auto displs = std::make_shared<std::vector<int>>(ArgIntArray(info, 5, "displs", size));
  CheckCount(env, send.bytes, "allgatherv bytes");
  CheckBlocks(env, recv, *counts, *displs, "allgatherv receive buffer");
  int bytes = static_cast<int>(send.bytes);
  job->run = [=](std::vector<char>&) {
    return Failed("MPI_Allgatherv", MPI_Allgatherv(send.data, bytes, MPI_BYTE, recv.data, counts->data(), displs->data(), MPI_BYTE, comm));
  };
  return start.Queue();
}

// reduceScatter(lane, comm, send, recv, recvCounts, dtype, op, divisor): counts in elements.
Napi::Value ReduceScatter(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  int size = SizeOf(comm), rank = 0;
  MPI_Comm_rank(comm, &rank);
  Span send = job->Pin(env, info[2], "send buffer");
  Span recv = job->Pin(env, info[3], "receive buffer");
  auto counts = std::make_shared<std::vector<int>>(ArgIntArray(info, 4, "recvCounts", static_cast<size_t>(size)));
  std::string dtype = ArgString(info, 5, "dtype");
  MPI_Datatype type = DatatypeOf(env, dtype);
  MPI_Op op = OpOf(env, dtype, ArgString(info, 6, "op"));
  int divisor = ArgInt(info, 7, "divisor");
  size_t element = BytesPerElement(env, dtype);
  size_t total = 0;
  for (int count : *counts) total += static_cast<size_t>(count < 0 ? 0 : count);
  CheckFits(env, send, total * element, "reduce-scatter send buffer");
  CheckFits(env, recv, static_cast<size_t>((*counts)[rank]) * element, "reduce-scatter receive buffer");
  size_t mine = static_cast<size_t>((*counts)[rank]);
  job->run = [=](std::vector<char>&) {
    int rc = MPI_Reduce_scatter(send.data, recv.data, counts->data(), type, op, comm);
    if (rc == MPI_SUCCESS) DivideInPlace(recv.data, mine, dtype, divisor);
    return Failed("MPI_Reduce_scatter", rc);
  };
  return start.Queue();
}

// allreduce(lane, comm, send, recv | null, dtype, op, divisor): recv === send reduces
// in place (MPI_IN_PLACE); recv null reduces into the lane's scratch and copies back.
Napi::Value AllReduce(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  Span send = job->Pin(env, info[2], "send buffer");
  bool viaScratch = info[3].IsNull() || info[3].IsUndefined();
  bool inPlace = !viaScratch && info[3].StrictEquals(info[2]);
  Span recv = viaScratch || inPlace ? send : job->Pin(env, info[3], "receive buffer");
  std::string dtype = ArgString(info, 4, "dtype");
  MPI_Datatype type = DatatypeOf(env, dtype);
  MPI_Op op = OpOf(env, dtype, ArgString(info, 5, "op"));
  int divisor = ArgInt(info, 6, "divisor");
  size_t element = BytesPerElement(env, dtype);
  size_t count = send.bytes / element;
  CheckCount(env, count, "allreduce element count");
  CheckFits(env, recv, count * element, "allreduce receive buffer");
  job->run = [=](std::vector<char>& scratch) {
    int rc;
    if (inPlace) {
      rc = MPI_Allreduce(MPI_IN_PLACE, send.data, static_cast<int>(count), type, op, comm);
    } else if (viaScratch) {
      if (scratch.size() < send.bytes) scratch.resize(send.bytes);
      rc = MPI_Allreduce(send.data, scratch.data(), static_cast<int>(count), type, op, comm);
      if (rc == MPI_SUCCESS) std::memcpy(send.data, scratch.data(), count * element);
    } else {
      rc = MPI_Allreduce(send.data, recv.data, static_cast<int>(count), type, op, comm);
    }
    if (rc == MPI_SUCCESS) DivideInPlace(recv.data, count, dtype, divisor);
    return Failed("MPI_Allreduce", rc);
  };
  return start.Queue();
}

// bcast(lane, comm, buffer, root)
Napi::Value Broadcast(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  Span buffer = job->Pin(env, info[2], "buffer");
  int root = ArgInt(info, 3, "root");
  CheckCount(env, buffer.bytes, "broadcast bytes");
  job->run = [=](std::vector<char>&) { return Failed("MPI_Bcast", MPI_Bcast(buffer.data, static_cast<int>(buffer.bytes), MPI_BYTE, root, comm)); };
  return start.Queue();
}

// barrier(lane, comm)
Napi::Value Barrier(const Napi::CallbackInfo& info) {
  OpStart start(info);
  MPI_Comm comm = start.comm;
  start.job->run = [=](std::vector<char>&) { return Failed("MPI_Barrier", MPI_Barrier(comm)); };
  return start.Queue();
}

// send(lane, comm, buffer, peer, tag)
Napi::Value Send(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  Span buffer = job->Pin(env, info[2], "buffer");
  int peer = ArgInt(info, 3, "peer");
  int tag = ArgInt(info, 4, "tag");
  CheckCount(env, buffer.bytes, "send bytes");
  job->run = [=](std::vector<char>&) { return Failed("MPI_Send", MPI_Send(buffer.data, static_cast<int>(buffer.bytes), MPI_BYTE, peer, tag, comm)); };
  return start.Queue();
}

// recv(lane, comm, buffer, peer, tag) -> Promise<bytes received>
Napi::Value Recv(const Napi::CallbackInfo& info) {
  OpStart start(info);
  Napi::Env env = start.env;
  MPI_Comm comm = start.comm;
  Job* job = start.job.get();
  Span buffer = job->Pin(env, info[2], "buffer");
  int peer = ArgInt(info, 3, "peer");
  int tag = ArgInt(info, 4, "tag");
  CheckCount(env, buffer.bytes, "receive bytes");
  auto received = std::make_shared<int>(0);
  job->run = [=](std::vector<char>&) {
    MPI_Status status;
    int rc = MPI_Recv(buffer.data, static_cast<int>(buffer.bytes), MPI_BYTE, peer, tag, comm, &status);
    if (rc == MPI_SUCCESS) MPI_Get_count(&status, MPI_BYTE, received.get());
    return Failed("MPI_Recv", rc);
  };
  job->result = [received](Napi::Env e) { return Napi::Number::New(e, *received); };
  return start.Queue();
}

}  // namespace

void RegisterCollectiveOps(Napi::Env env, Napi::Object exports) {
  exports.Set("alltoall", Napi::Function::New(env, AllToAll, "alltoall"));
  exports.Set("alltoallv", Napi::Function::New(env, AllToAllV, "alltoallv"));
  exports.Set("allgather", Napi::Function::New(env, AllGather, "allgather"));
  exports.Set("allgatherv", Napi::Function::New(env, AllGatherV, "allgatherv"));
  exports.Set("reduceScatter", Napi::Function::New(env, ReduceScatter, "reduceScatter"));
  exports.Set("allreduce", Napi::Function::New(env, AllReduce, "allreduce"));
  exports.Set("bcast", Napi::Function::New(env, Broadcast, "bcast"));
  exports.Set("barrier", Napi::Function::New(env, Barrier, "barrier"));
  exports.Set("send", Napi::Function::New(env, Send, "send"));
  exports.Set("recv", Napi::Function::New(env, Recv, "recv"));
}

}  // namespace ulysses_mpi
