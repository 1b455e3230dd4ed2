// nccl/comm.cc — communicators: ncclGetUniqueId, the ncclCommInit* family, finalize/destroy/abort, the queries and
// ncclCommGetAsyncError.
//
// ncclGetUniqueId starts a zerowire TCP store server in the calling process (zw::create_unique_id: address and auth
// token in the id; one server per id, kept until exit); with NCCL_COMM_ID=host:port every rank computes the id of a
// store at that address instead (zw::unique_id_at) and rank 0's ncclCommInit* serves it (zw::serve_unique_id).
// ncclCommInitRank connects to it and creates a zw::Communicator of nranks over it, named "nccl/<n>" for the n-th
// communicator created from that id (split and shrink children extend their parent's name). Inside a group the creation
// waits for ncclGroupEnd (group.cc); with config->blocking == 0 it runs in a thread of its own and the call returns
// ncclInProgress. Non-goals: interrupting a creation that waits for absent ranks (it ends at ZW_TIMEOUT).
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "bootstrap/store_util.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/thread.h"
#include "nccl/nccl_env.h"
#include "nccl/nccl_internal.h"
#include "zerowire/bootstrap.h"

namespace zw::nccl {
namespace {

Store::Timeout store_timeout() { return store::timeout_from_seconds(knobs().timeout_s); }

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config,
                       const char* call) {
  report_nccl_env();
  if (out == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(call) + ": comm is NULL");
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument,
                std::string(call) + ": rank " + std::to_string(rank) + " of nranks " + std::to_string(nranks) +
                    " (need 0 <= rank < nranks)");
  CommOptions options;
  if (ncclResult_t r = read_config(config, &options); r != ncclSuccess) return r;
  UniqueId uid;
  std::memcpy(uid.bytes, id.internal, sizeof uid.bytes);
  if (rank == 0 && std::getenv("NCCL_COMM_ID") != nullptr) {  // as NCCL: rank 0 serves the id NCCL_COMM_ID names
    const Status served = serve_unique_id(uid);
    if (!served.ok()) return fail(nullptr, served, std::string(call) + " on rank 0 (NCCL_COMM_ID)");
  }
  auto store = connect_unique_id(uid, store_timeout());
  if (!store.ok()) return fail(nullptr, store.status(), std::string(call) + " on rank " + std::to_string(rank));
  auto* comm = new ncclComm;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->options = options;
  comm->store = std::move(store).value();
  if (cudaGetDevice(&comm->device) != cudaSuccess) {
    cudaGetLastError();
    comm->device = -1;  // no GPU: host memory only
  }
  *out = comm;
  return start_init(comm);
}

}  // namespace

ncclResult_t create_zw(ncclComm* comm) {
  if (comm->device >= 0) cudaSetDevice(comm->device);  // a deferred init runs in a thread of its own
  if (comm->store_name.empty()) {
    // Communicators created from one id are numbered by their order of creation (each rank finishes creating one
    // only after all its ranks arrived), so each gets a name of its own that its children extend.
    auto arrival = comm->store->add("nccl/arrivals", 1);
    if (!arrival.ok()) {
      comm->init_result.store(fail(comm, arrival.status(), "registering with the store of the unique id"));
      return comm->init_result.load() == ncclSuccess ? ncclInternalError : static_cast<ncclResult_t>(comm->init_result.load());
    }
    comm->store_name = "nccl/" + std::to_string((arrival.value() - 1) / comm->nranks);
  }
  CommConfig config;
  config.name = comm->store_name;
  if (comm->options.max_ctas > 0) config.cuda_blocks = comm->options.max_ctas;
  if (!comm->options.ignored.empty())
    ZW_INFO(kInit, "libzwnccl: %s (rank %d): ncclConfig_t fields with no effect under zerowire: %s",
            comm->store_name.c_str(), comm->rank, comm->options.ignored.c_str());
  auto created = Communicator::create(comm->store, comm->rank, comm->nranks, config);
  if (!created.ok()) {
    ncclResult_t r = fail(comm, created.status(), "creating the communicator of rank " + std::to_string(comm->rank) +
                                                      " of " + std::to_string(comm->nranks));
    comm->init_result.store(r);
    return r;
  }
  comm->zw = std::move(created).value();
  comm->init_result.store(ncclSuccess);
  return ncclSuccess;
}

ncclResult_t start_init(ncclComm* comm) {
  if (in_group()) {
    defer_init(comm, [comm] { return create_zw(comm); });
    return ncclSuccess;
  }
  if (!comm->options.blocking) {
    Result<std::thread> init = start_thread("the non-blocking init thread", [comm] { (void)create_zw(comm); });
    if (!init.ok()) {
      comm->init_result.store(fail(comm, init.status(), "ncclCommInit* of rank " + std::to_string(comm->rank)));
      return static_cast<ncclResult_t>(comm->init_result.load());
    }
    comm->init_thread = std::move(init).value();
    return ncclInProgress;
  }
  return create_zw(comm);
}

ncclResult_t check_comm(ncclComm* comm, const char* call) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(call) + ": comm is NULL");
  int init = comm->init_result.load();
  if (init != ncclSuccess && init != ncclInProgress)
    return fail(comm, ncclInvalidUsage, std::string(call) + ": the communicator failed to initialize (" +
                                            ncclGetErrorString(static_cast<ncclResult_t>(init)) + ")");
  if (comm->aborted.load(std::memory_order_relaxed))
    return fail(comm, ncclInvalidUsage, std::string(call) + ": the communicator was aborted");
  return ncclSuccess;
}

ncclResult_t ready_comm(ncclComm* comm, const char* call) {
  if (comm != nullptr && comm->init_result.load(std::memory_order_acquire) == ncclSuccess &&
      !comm->aborted.load(std::memory_order_relaxed))
    return ncclSuccess;  // the common case, without the checks' branches
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  while (comm->init_result.load() == ncclInProgress) {
    if (in_group() || !comm->init_thread.joinable())
      return fail(comm, ncclInvalidUsage,
                  std::string(call) + ": the communicator is created at ncclGroupEnd; use it after that");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return check_comm(comm, call);
}

bool is_device_pointer(const void* ptr, int* device) {
  cudaPointerAttributes attr{};
  if (ptr == nullptr || cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  *device = attr.device;
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

}  // namespace zw::nccl

using namespace zw::nccl;  // NOLINT(google-build-using-namespace): the C API below

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  zw::nccl::report_nccl_env();
  if (id == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  // NCCL_COMM_ID: every rank computes the id of the store at that address (rank 0's ncclCommInit* serves it).
  const char* fixed = std::getenv("NCCL_COMM_ID");
  auto uid = fixed != nullptr ? zw::unique_id_at(fixed) : zw::create_unique_id();
  if (!uid.ok())
    return fail(nullptr, uid.status(),
                fixed != nullptr ? "ncclGetUniqueId: NCCL_COMM_ID" : "ncclGetUniqueId: starting the store server");
  static_assert(sizeof(uid->bytes) == sizeof(id->internal), "zerowire's unique id is NCCL's size");
  std::memcpy(id->internal, uid->bytes, sizeof id->internal);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  return init_rank(comm, nranks, id, rank, config, "ncclCommInitRankConfig");
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init_rank(comm, nranks, id, rank, nullptr, "ncclCommInitRank");
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId, ncclUniqueId* ids,
                                      ncclConfig_t* config) {
  // Every id names a store every rank can reach; zerowire needs one, so the first serves all ranks.
  if (nId < 1 || ids == nullptr)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRankScalable: needs at least one unique id");
  return init_rank(comm, nranks, ids[0], rank, config, "ncclCommInitRankScalable");
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitAll: comms is NULL or ndev < 1");
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  int saved = 0;
  cudaGetDevice(&saved);
  ncclGroupStart();
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < ndev && first == ncclSuccess; ++i) {
    if (cudaError_t e = cudaSetDevice(devlist ? devlist[i] : i); e != cudaSuccess)
      first = cuda_fail(nullptr, e, "ncclCommInitAll: cudaSetDevice(" + std::to_string(devlist ? devlist[i] : i) + ")");
    else
      first = ncclCommInitRank(comms + i, ndev, id, i);
  }
  ncclResult_t end = ncclGroupEnd();
  cudaSetDevice(saved);
  return first != ncclSuccess ? first : end;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = ready_comm(comm, "ncclCommFinalize"); r != ncclSuccess) return r;
  std::deque<zw::Work> pending;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    pending.swap(comm->pending);
  }
  for (const zw::Work& w : pending)
    if (zw::Status s = w.wait(); !s.ok()) return fail(comm, s, "ncclCommFinalize: an operation failed");
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->init_thread.joinable()) comm->init_thread.join();
  for (const zw::Work& w : comm->pending) (void)w.wait();  // operations finish (or fail) before the memory goes
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;
  if (comm->init_thread.joinable()) comm->init_thread.join();
  if (comm->zw)
    comm->zw->abort(zw::Status(zw::Code::kAborted, "ncclCommAbort on rank " + std::to_string(comm->rank)));
  while (comm->active.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(100));  // calls now failing
  delete comm;  // pending operations fail at once; the destructor waits for them
  return ncclSuccess;
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommRevoke"); r != ncclSuccess) return r;
  if (flags != NCCL_REVOKE_DEFAULT)
    return fail(comm, ncclInvalidArgument, "ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0)");
  comm->aborted = true;
  if (comm->zw) comm->zw->abort(zw::Status(zw::Code::kAborted, "ncclCommRevoke on rank " + std::to_string(comm->rank)));
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (ncclResult_t r = check_comm(comm, "ncclCommCount"); r != ncclSuccess) return r;
  if (count == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (ncclResult_t r = check_comm(comm, "ncclCommCuDevice"); r != ncclSuccess) return r;
  if (device == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (ncclResult_t r = check_comm(comm, "ncclCommUserRank"); r != ncclSuccess) return r;
  if (rank == nullptr) return fail(comm, ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  int init = comm->init_result.load();
  if (init != ncclSuccess) {
    *error = static_cast<ncclResult_t>(init);
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  while (comm->async_error == ncclSuccess && !comm->pending.empty() && comm->pending.front().test()) {
    zw::Status s = comm->pending.front().wait();
    comm->pending.pop_front();
    if (!s.ok()) {
      comm->async_error = result_of(s);
      comm->async_text = s.message();
      comm->last_error = s.message();
    }
  }
  *error = comm->async_error;
  return ncclSuccess;
}

}  // extern "C"
