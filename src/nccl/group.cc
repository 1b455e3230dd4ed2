// nccl/group.cc — ncclGroupStart/End/SimulateEnd and issuing operations on zerowire.
//
// Between ncclGroupStart and the matching ncclGroupEnd (groups nest; the outermost End counts) each thread records
// communicator creations and operations. At End: the creations run first, each in a thread of its own when there
// are several (nccl-tests' -g N creates the N ranks of one communicator in one group, so they must meet in the store
// at the same time), then every communicator's operations are issued (in a thread per communicator when there are
// several, because a device collective waits until the peers' host threads issued it too).
// Per communicator, issue() runs the collectives in their recorded order and then every send and receive of the
// group as one zw::send_recv batch: every rank orders its group the same way whatever the interleaving it used,
// and a batch posts all receives before any send waits (NCCL's deadlock-free group semantics).
// Host memory (zerowire's extension) is waited for before issue() returns; device memory is stream-ordered, and the
// newest device Work handles (kKeepPending) are kept, untested, for ncclCommGetAsyncError. An all-to-all in place runs
// from a copy of its input (copy_aside).
#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/reduce.h"
#include "nccl/nccl_internal.h"

namespace zw::nccl {
namespace {

struct GroupState {
  int depth = 0;
  // The recorded operations per communicator, in the order the communicators first appeared.
  std::vector<std::pair<ncclComm*, std::vector<Op>>> ops;
  std::vector<std::pair<ncclComm*, std::function<ncclResult_t()>>> inits;
  std::vector<Op> spare;  // the last group's cleared operation list, reused (a group per call is the common case)

  void add(ncclComm* comm, Op op) {
    auto it = std::find_if(ops.begin(), ops.end(), [comm](const auto& e) { return e.first == comm; });
    if (it == ops.end()) it = ops.insert(ops.end(), {comm, std::exchange(spare, {})});
    it->second.push_back(std::move(op));
  }
  size_t op_count() const {
    size_t n = 0;
    for (const auto& e : ops) n += e.second.size();
    return n;
  }
};

thread_local GroupState t_group;

// Runs fns (several at once in threads of their own) and returns the first failure.
template <typename F>
ncclResult_t run_all(std::vector<F>& fns) {
  if (fns.size() == 1) return fns[0]();
  std::vector<ncclResult_t> results(fns.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < fns.size(); ++i) threads.emplace_back([&, i] { results[i] = fns[i](); });
  for (auto& t : threads) t.join();
  for (ncclResult_t r : results)
    if (r != ncclSuccess) return r;
  return ncclSuccess;
}

// Host PreMulSum: zerowire pre-multiplies on the device path only, so the input is scaled into the communicator's
// scratch here and summed from there.
void prescale_host(ncclComm* comm, Op& op) {
  CollectiveOptions& o = op.options;
  const size_t bytes = o.input.bytes;
  if (comm->scratch.size() < bytes) comm->scratch.resize(bytes);
  kernels::scale(o.dtype, comm->scratch.data(), o.input.ptr, bytes / dtype_size(o.dtype), o.premul);
  o.input = MemRef::host(comm->scratch.data(), bytes);  // an in-place operation becomes out of place
  o.premul = 1.0;
}

bool overlaps(const CollectiveOptions& o) {
  const auto *a = o.input.data(), *b = o.output.data();
  return o.input.bytes > 0 && o.output.bytes > 0 && a < b + o.output.bytes && b < a + o.input.bytes;
}

// ncclAlltoAll with overlapping buffers (NCCL accepts sendbuff == recvbuff, and nccl-tests runs it so): zerowire's
// all_to_all has no in-place form, so the input is first copied aside — host memory into the communicator's scratch,
// device memory into a stream-ordered allocation on the operation's stream (*aside; the caller frees it there after
// the operation, so nothing waits for the device).
ncclResult_t copy_aside(ncclComm* comm, Op& op, void** aside) {
  CollectiveOptions& o = op.options;
  const size_t bytes = o.input.bytes;
  if (op.host) {
    if (comm->scratch.size() < bytes) comm->scratch.resize(bytes);
    std::memcpy(comm->scratch.data(), o.input.ptr, bytes);
    o.input = MemRef::host(comm->scratch.data(), bytes);
    return ncclSuccess;
  }
  auto stream = static_cast<cudaStream_t>(o.stream);
  int saved = -1;
  cudaGetDevice(&saved);
  cudaSetDevice(o.input.device);
  cudaError_t e = cudaMallocAsync(aside, bytes, stream);
  if (e == cudaSuccess) e = cudaMemcpyAsync(*aside, o.input.ptr, bytes, cudaMemcpyDeviceToDevice, stream);
  if (saved >= 0) cudaSetDevice(saved);
  if (e != cudaSuccess)
    return cuda_fail(comm, e,
                     "ncclAlltoAll in place on rank " + std::to_string(comm->rank) + ": copying the input aside");
  o.input.ptr = *aside;
  return ncclSuccess;
}

Result<Work> start(Communicator& zc, const Op& op) {
  switch (op.kind) {
    case Op::kAllReduce: return all_reduce(zc, op.options);
    case Op::kAllGather: return all_gather(zc, op.options);
    case Op::kReduceScatter: return reduce_scatter(zc, op.options);
    case Op::kBroadcast: return broadcast(zc, op.options);
    case Op::kReduce: return reduce(zc, op.options);
    case Op::kAllToAll: return all_to_all(zc, op.options);
    case Op::kGather: return gather(zc, op.options);
    case Op::kScatter: return scatter(zc, op.options);
    case Op::kSend:
    case Op::kRecv: break;
  }
  return Status(Code::kInternal, "point-to-point operation issued as a collective");
}

const char* op_name(Op::Kind k) {
  static const char* const kNames[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast",
                                       "ncclReduce",    "ncclAlltoAll",  "ncclGather",        "ncclScatter",
                                       "ncclSend",      "ncclRecv"};
  return kNames[k];
}

// Waits for host work; keeps device work for ncclCommGetAsyncError (finished ones are dropped on the way).
// A failure of the communicator itself (not of the call's arguments) is also its asynchronous error, as in NCCL.
ncclResult_t failed(ncclComm* comm, const Status& s, const char* what) {
  ncclResult_t r = fail(comm, s, std::string(what) + " on rank " + std::to_string(comm->rank));
  if (!s.is_usage_error()) {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (comm->async_error == ncclSuccess) {
      comm->async_error = r;
      comm->async_text = s.message();
    }
  }
  return r;
}

ncclResult_t track(ncclComm* comm, Result<Work> work, bool host, const char* what) {
  if (!work.ok()) return failed(comm, work.status(), what);
  if (host) {
    Status s = work->wait();
    return s.ok() ? ncclSuccess : failed(comm, s, what);
  }
  std::lock_guard<std::mutex> lock(comm->mu);
  // Only the newest operations are kept, untested: testing one is a driver query (cudaEventQuery), which must not be
  // paid per call. Dropping an older one loses no error: the device path's failures are
  // sticky (a kernel's failure word, a dead peer, CUDA's context error, the staged engine's first error) and every
  // later operation's Work reports them, which ncclCommGetAsyncError tests.
  comm->pending.push_back(std::move(work).value());
  if (comm->pending.size() > kKeepPending) comm->pending.pop_front();
  return ncclSuccess;
}

}  // namespace

bool in_group() { return t_group.depth > 0; }

void defer_init(ncclComm* comm, std::function<ncclResult_t()> init) {
  t_group.inits.emplace_back(comm, std::move(init));
}

ncclResult_t submit(ncclComm* comm, Op op) {
  if (in_group()) {
    t_group.add(comm, std::move(op));
    return ncclSuccess;
  }
  return issue(comm, std::span<Op>(&op, 1));
}

ncclResult_t issue(ncclComm* comm, std::span<Op> ops) {
  struct Active {  // ncclCommAbort from another thread waits until this call left the communicator
    std::atomic<int>& n;
    explicit Active(std::atomic<int>& c) : n(c) { ++n; }
    ~Active() { --n; }
  } active(comm->active);
  if (ncclResult_t r = ready_comm(comm, op_name(ops[0].kind)); r != ncclSuccess) return r;
  Communicator& zc = *comm->zw;
  std::vector<P2POp> batch;
  bool batch_host = false;
  for (Op& op : ops) {
    if (op.kind == Op::kSend || op.kind == Op::kRecv) {
      batch.push_back(P2POp{op.kind == Op::kSend ? P2PKind::kSend : P2PKind::kRecv, op.options});
      batch_host = batch_host || op.host;
      continue;
    }
    if (op.host && op.options.premul != 1.0) prescale_host(comm, op);
    void* aside = nullptr;
    if (op.kind == Op::kAllToAll && overlaps(op.options))
      if (ncclResult_t r = copy_aside(comm, op, &aside); r != ncclSuccess) return r;
    ncclResult_t r = track(comm, start(zc, op), op.host, op_name(op.kind));
    if (aside != nullptr) cudaFreeAsync(aside, static_cast<cudaStream_t>(op.options.stream));
    if (r != ncclSuccess) return r;
  }
  if (batch.empty()) return ncclSuccess;
  return track(comm, send_recv(zc, batch), batch_host, batch.size() == 1 ? op_name(ops.back().kind) : "ncclGroupEnd");
}

}  // namespace zw::nccl

using namespace zw::nccl;  // NOLINT(google-build-using-namespace): the C API below

extern "C" {

ncclResult_t ncclGroupStart(void) {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (t_group.depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  GroupState g = std::move(t_group);  // issuing may start groups of its own on this thread (none do today)
  t_group = GroupState{};
  ncclResult_t result = ncclSuccess;
  if (!g.inits.empty()) {
    std::vector<std::function<ncclResult_t()>> inits;
    for (auto& [comm, init] : g.inits) inits.push_back(std::move(init));
    result = run_all(inits);
  }
  ncclResult_t issued = ncclSuccess;
  if (g.ops.size() == 1) {  // one communicator (nccl-tests' -g 1 wraps every call so): issued here, and the lists
    issued = issue(g.ops[0].first, g.ops[0].second);  // are kept for the thread's next group
    g.ops[0].second.clear();
    t_group.spare = std::move(g.ops[0].second);
    g.ops.clear();
    if (t_group.ops.empty()) t_group.ops = std::move(g.ops);
  } else if (!g.ops.empty()) {  // several: each in a thread of its own, on its communicator's GPU
    std::vector<std::function<ncclResult_t()>> issues;
    for (auto& [comm, ops] : g.ops)
      issues.push_back([c = comm, &o = ops] {
        if (c->device >= 0) cudaSetDevice(c->device);
        return issue(c, o);
      });
    issued = run_all(issues);
  }
  return result != ncclSuccess ? result : issued;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* info) {
  if (info == nullptr || info->magic != 0x74685283u)
    return fail(nullptr, ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL or not NCCL_SIM_INFO_INITIALIZER");
  if (t_group.depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
  // zerowire has no time model to report. Like NCCL's simulation, the group's operations are not launched.
  const size_t dropped = t_group.op_count();
  if (--t_group.depth == 0) {
    t_group.ops.clear();
    std::vector<std::function<ncclResult_t()>> inits;  // communicator creations are not simulated: they happen
    for (auto& [comm, init] : t_group.inits) inits.push_back(std::move(init));
    t_group.inits.clear();
    if (!inits.empty()) (void)run_all(inits);
  }
  return fail(nullptr, ncclInvalidUsage,
              "ncclGroupSimulateEnd: zerowire cannot estimate the time of a group (no cost model is exposed); " +
                  std::to_string(dropped) + " recorded operations were not launched");
}

}  // extern "C"
