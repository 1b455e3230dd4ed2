// nccl/p2p.cc — ncclSend and ncclRecv on zerowire's send_recv batches (zerowire/communicator.h).
//
// Outside a group each call is a batch of one; inside a group every send and receive of a communicator becomes one
// batch at ncclGroupEnd (group.cc), which is what makes NCCL's exchange patterns (sendrecv, all-to-all by hand,
// pipeline stages) free of deadlocks. The peer may be this rank (matched in order inside the group, as NCCL).
// Device buffers between ranks are staged through pinned host memory, stream-ordered: the call enqueues and returns
// (zerowire's send_recv, gpu_path.h); only a batch with a peer in this process (ranks as threads) waits.
#include "nccl/nccl_internal.h"

namespace zw::nccl {
namespace {

ncclResult_t p2p(const char* name, Op::Kind kind, void* buff, size_t count, ncclDataType_t type, int peer,
                 ncclComm* comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, name); r != ncclSuccess) return r;
  Op rec{kind, {}, false};
  CollectiveOptions& o = rec.options;
  if (ncclResult_t r = map_dtype(comm, type, false, ncclSum, &o.dtype); r != ncclSuccess) return r;
  if (peer < 0 || peer >= comm->nranks)
    return fail(comm, ncclInvalidArgument,
                std::string(name) + ": peer " + std::to_string(peer) + " is outside 0.." + std::to_string(comm->nranks - 1));
  const size_t bytes = count * nccl_type_size(type);
  if (bytes > 0 && buff == nullptr)
    return fail(comm, ncclInvalidArgument, std::string(name) + ": buffer is NULL but count is " + std::to_string(count));
  int dev = -1;
  const bool device = bytes > 0 && is_device_pointer(buff, &dev);
  const MemRef m{buff, bytes, device ? MemKind::kCudaDevice : MemKind::kHost, device ? dev : -1};
  (kind == Op::kSend ? o.input : o.output) = m;
  rec.host = !device;
  o.count = count;
  o.peer = peer;
  o.stream = stream;
  return submit(comm, std::move(rec));
}

}  // namespace
}  // namespace zw::nccl

extern "C" {

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return zw::nccl::p2p("ncclSend", zw::nccl::Op::kSend, const_cast<void*>(send), count, type, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t stream) {
  return zw::nccl::p2p("ncclRecv", zw::nccl::Op::kRecv, recv, count, type, peer, comm, stream);
}

}  // extern "C"
