// nccl/nccl_internal.h — what the files of libzwnccl share: the communicator behind ncclComm_t, the operations the
// API records, error reporting, and the group machinery.
//
// Layering: NCCL's C API (include/nccl.h) over zerowire's C++ API (zerowire/communicator.h); nothing here reaches
// into the collectives layer's internals. One ncclComm wraps one zw::Communicator created over the TCP store that
// ncclGetUniqueId started (its address and token travel in the id).
// Threading: as NCCL, a communicator is used by one thread at a time; the group state is per thread; ncclComm's
// error state (mu) may be read from any thread (PyTorch's watchdog polls ncclCommGetAsyncError from its own).
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "zerowire/communicator.h"
#include "zerowire/store.h"

namespace zw::nccl {

// Communicator options read from an ncclConfig_t (config.cc).
struct CommOptions {
  bool blocking = true;  // ncclConfig_t::blocking (0: init returns ncclInProgress)
  std::string name;      // ncclConfig_t::commName (log and error messages only)
  int max_ctas = -1;     // ncclConfig_t::maxCTAs: thread blocks a device kernel may use (CommConfig::cuda_blocks)
  std::string ignored;   // the fields set that zerowire has no use for ("minCTAs=4, netName=IB"), logged at creation
};

// One operation as the API recorded it; issued at once, or at ncclGroupEnd.
struct Op {
  enum Kind { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kGather, kScatter, kSend, kRecv };
  Kind kind;
  CollectiveOptions options;  // buffers already typed host or device, stream, dtype, op, root/peer
  bool host = false;          // host memory (zerowire's extension): the issuing call waits for it
};

}  // namespace zw::nccl

inline constexpr size_t kKeepPending = 32;  // ncclComm::pending keeps the newest device operations (group.cc)

struct ncclComm {
  int rank = 0;
  int nranks = 0;
  int device = -1;  // CUDA device current at init (ncclCommCuDevice)
  zw::nccl::CommOptions options;
  std::string store_name;              // communicator name in the store (children derive theirs from it)
  std::shared_ptr<zw::Store> store;    // the store of the unique id (split and shrink meet there)
  std::unique_ptr<zw::Communicator> zw;

  // Initialization: ncclInProgress until the zerowire communicator exists (deferred by a group, or non-blocking).
  std::atomic<int> init_result{ncclInProgress};
  std::thread init_thread;  // non-blocking init outside a group

  // Errors (guarded by mu): the last error's text, operations not yet known finished, the first asynchronous error.
  std::mutex mu;
  std::string last_error;
  std::deque<zw::Work> pending;
  ncclResult_t async_error = ncclSuccess;
  std::string async_text;
  std::atomic<bool> aborted{false};  // ncclCommAbort/Revoke (read without mu on every call)
  std::atomic<int> active{0};  // threads inside issue() (ncclCommAbort waits for them before freeing)

  int children = 0;                   // splits and shrinks so far (names their communicators)
  std::vector<double> premul;         // PreMulSum scalars, by handle - ncclNumOps (NaN: destroyed)
  std::vector<const void*> premul_device;  // their device-resident scalars (null: host immediate)
  std::vector<ncclDataType_t> premul_type;
  std::vector<std::byte> scratch;     // host PreMulSum: the scaled input
};

namespace zw::nccl {

// Records `text` as the calling thread's last error (and comm's, if any), logs it, and returns `code`.
ncclResult_t fail(ncclComm* comm, ncclResult_t code, const std::string& text);
// The NCCL code for a zerowire failure: usage errors -> ncclInvalidArgument / ncclInvalidUsage, dead or aborting
// peers and lost links -> ncclRemoteError, the rest -> ncclSystemError / ncclInternalError.
ncclResult_t result_of(const Status& status);
// fail(comm, result_of(status), what + ": " + message).
ncclResult_t fail(ncclComm* comm, const Status& status, const std::string& what);
ncclResult_t cuda_fail(ncclComm* comm, cudaError_t err, const std::string& what);

// Reads `config` (may be null) by its size/magic/version prefix (config.cc).
ncclResult_t read_config(const ncclConfig_t* config, CommOptions* out);
// NCCL's types and reductions as zerowire's. `reduces`: the type must support arithmetic (else moved as bytes).
ncclResult_t map_dtype(ncclComm* comm, ncclDataType_t type, bool reduces, ncclRedOp_t op, DataType* out);
size_t nccl_type_size(ncclDataType_t type);

// A usable communicator: not null, not aborted, its initialization not failed.
ncclResult_t check_comm(ncclComm* comm, const char* call);
// check_comm, then waits for a non-blocking initialization to finish (deferred ones finish at ncclGroupEnd).
ncclResult_t ready_comm(ncclComm* comm, const char* call);
// Whether `ptr` is device memory (cudaPointerGetAttributes; host when CUDA reports none).
bool is_device_pointer(const void* ptr, int* device);

// Issues `ops` on `comm` (collectives in order, then every send and recv as one batch) and, for host memory, waits.
ncclResult_t issue(ncclComm* comm, std::span<Op> ops);
// Issues now, or records for ncclGroupEnd inside a group (group.cc).
ncclResult_t submit(ncclComm* comm, Op op);
bool in_group();
// Inside a group: `init` runs at ncclGroupEnd, in a thread of its own beside the group's other inits.
void defer_init(ncclComm* comm, std::function<ncclResult_t()> init);

// Creates comm->zw over comm->store (comm.cc); sets init_result.
ncclResult_t create_zw(ncclComm* comm);
// Starts or defers (group) or backgrounds (non-blocking) create_zw; returns what the init call returns.
ncclResult_t start_init(ncclComm* comm);

}  // namespace zw::nccl
