// nccl/coll.cc — NCCL's collectives and PreMulSum reductions on zerowire's collectives.
//
// Each call checks what NCCL checks (communicator, data type, reduction, root, buffers), finds out whether its
// buffers are device memory (cudaPointerGetAttributes: device and managed memory run on the stream through
// zerowire's GPU path; anything else is host memory, zerowire's extension, waited for before the call returns) and
// records the operation (group.cc issues it now or at ncclGroupEnd). Counts keep NCCL's meaning, which is
// zerowire's: per rank for all-gather, reduce-scatter and all-to-all, the whole buffer otherwise.
// PreMulSum: handles from ncclNumOps up index the communicator's scalars; a device-resident scalar is read when the
// operation is issued (after the stream's earlier work: the call waits for the stream).
// Non-goals: reductions zerowire lacks (int8, fp8; uint32/uint64 min and max): ncclInvalidUsage naming them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>

#include "nccl/nccl_internal.h"

namespace zw::nccl {
namespace {

struct Call {
  const char* name;
  Op::Kind kind;
  bool reduces;
  bool rooted;
};

// A buffer of `bytes` at `ptr` (may be null when unused), typed host or device.
MemRef typed(const void* ptr, size_t bytes, bool* device, int* ordinal) {
  int dev = -1;
  *device = ptr != nullptr && is_device_pointer(ptr, &dev);
  if (*device) *ordinal = dev;
  return MemRef{const_cast<void*>(ptr), bytes, *device ? MemKind::kCudaDevice : MemKind::kHost, *device ? dev : -1};
}

double scalar_value(const void* p, ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return static_cast<double>(__half2float(*static_cast<const __half*>(p)));
    case ncclBfloat16: return static_cast<double>(__bfloat162float(*static_cast<const __nv_bfloat16*>(p)));
    case ncclFloat32: return static_cast<double>(*static_cast<const float*>(p));
    case ncclFloat64: return *static_cast<const double*>(p);
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

// The zerowire reduction (and premul factor) for `op` on `comm`.
ncclResult_t map_op(ncclComm* comm, const char* call, ncclRedOp_t op, cudaStream_t stream, ReduceOp* out,
                    double* premul) {
  *premul = 1.0;
  switch (op) {
    case ncclSum: *out = ReduceOp::kSum; return ncclSuccess;
    case ncclProd: *out = ReduceOp::kProd; return ncclSuccess;
    case ncclMax: *out = ReduceOp::kMax; return ncclSuccess;
    case ncclMin: *out = ReduceOp::kMin; return ncclSuccess;
    case ncclAvg: *out = ReduceOp::kAvg; return ncclSuccess;
    default: break;
  }
  const long idx = static_cast<long>(op) - ncclNumOps;
  if (idx < 0 || idx >= static_cast<long>(comm->premul_type.size()) || comm->premul_type[idx] == ncclNumTypes)
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": reduction " + std::to_string(static_cast<int>(op)) +
                    " is neither a built-in one (0..4) nor a live ncclRedOpCreatePreMulSum handle of this communicator");
  *out = ReduceOp::kSum;
  *premul = comm->premul[idx];
  if (const void* dev = comm->premul_device[idx]) {
    double raw = 0;  // wide enough for any scalar type
    cudaError_t e = cudaMemcpyAsync(&raw, dev, nccl_type_size(comm->premul_type[idx]), cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) return cuda_fail(comm, e, std::string(call) + ": reading the PreMulSum scalar");
    *premul = scalar_value(&raw, comm->premul_type[idx]);
  }
  return ncclSuccess;
}

// Checks and records one collective. send/recv: NCCL's buffers; in_bytes/out_bytes: what the operation reads and
// writes on this rank (0 where the buffer is unused here).
ncclResult_t collective(const Call& c, const void* send, size_t in_bytes, void* recv, size_t out_bytes, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, int root, ncclComm* comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, c.name); r != ncclSuccess) return r;
  Op rec{c.kind, {}, false};
  CollectiveOptions& o = rec.options;
  if (ncclResult_t r = map_dtype(comm, type, c.reduces, c.reduces ? op : ncclSum, &o.dtype); r != ncclSuccess) return r;
  if (c.rooted && (root < 0 || root >= comm->nranks))
    return fail(comm, ncclInvalidArgument,
                std::string(c.name) + ": root " + std::to_string(root) + " is outside 0.." +
                    std::to_string(comm->nranks - 1));
  if ((in_bytes > 0 && send == nullptr) || (out_bytes > 0 && recv == nullptr))
    return fail(comm, ncclInvalidArgument,
                std::string(c.name) + ": " + (in_bytes > 0 && send == nullptr ? "sendbuff" : "recvbuff") +
                    " is NULL but count is " + std::to_string(count));
  if (c.reduces) {
    if (ncclResult_t r = map_op(comm, c.name, op, stream, &o.op, &o.premul); r != ncclSuccess) return r;
  }
  bool in_dev = false, out_dev = false;
  int ordinal = comm->device;
  o.input = typed(in_bytes > 0 ? send : nullptr, in_bytes, &in_dev, &ordinal);
  if (recv == send && in_bytes > 0) {  // in place: one pointer query
    out_dev = in_dev;
    o.output = MemRef{recv, out_bytes, o.input.kind, o.input.device};
  } else {
    o.output = typed(out_bytes > 0 ? recv : nullptr, out_bytes, &out_dev, &ordinal);
  }
  if (in_bytes > 0 && out_bytes > 0 && in_dev != out_dev)
    return fail(comm, ncclInvalidArgument,
                std::string(c.name) + ": sendbuff is " + (in_dev ? "device" : "host") + " memory but recvbuff is " +
                    (out_dev ? "device" : "host") + " memory (both must be one kind)");
  rec.host = !(in_dev || out_dev);
  o.count = count;
  o.root = root;
  o.stream = stream;
  return submit(comm, std::move(rec));
}

}  // namespace
}  // namespace zw::nccl

using namespace zw::nccl;  // NOLINT(google-build-using-namespace): the C API below

namespace {

size_t bytes_of(size_t count, ncclDataType_t type) { return count * nccl_type_size(type); }
int ranks(ncclComm_t comm) { return comm != nullptr ? comm->nranks : 0; }
bool is_rank(ncclComm_t comm, int root) { return comm != nullptr && comm->rank == root; }

}  // namespace

extern "C" {

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclAllReduce", Op::kAllReduce, true, false}, send, b, recv, b, count, type, op, 0, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclAllGather", Op::kAllGather, false, false}, send, b, recv, b * ranks(comm), count, type,
                    ncclSum, 0, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclReduceScatter", Op::kReduceScatter, true, false}, send, b * ranks(comm), recv, b, count,
                    type, op, 0, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclBroadcast", Op::kBroadcast, false, true}, send, is_rank(comm, root) ? b : 0, recv, b, count,
                    type, ncclSum, root, comm, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, type, root, comm, stream);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclReduce", Op::kReduce, true, true}, send, b, recv, is_rank(comm, root) ? b : 0, count, type,
                    op, root, comm, stream);
}

ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                          cudaStream_t stream) {
  const size_t b = bytes_of(count, type) * ranks(comm);
  return collective({"ncclAlltoAll", Op::kAllToAll, false, false}, send, b, recv, b, count, type, ncclSum, 0, comm,
                    stream);
}

ncclResult_t ncclGather(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                        cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclGather", Op::kGather, false, true}, send, b, recv, is_rank(comm, root) ? b * ranks(comm) : 0,
                    count, type, ncclSum, root, comm, stream);
}

ncclResult_t ncclScatter(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                         cudaStream_t stream) {
  const size_t b = bytes_of(count, type);
  return collective({"ncclScatter", Op::kScatter, false, true}, send, is_rank(comm, root) ? b * ranks(comm) : 0, recv,
                    b, count, type, ncclSum, root, comm, stream);
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpCreatePreMulSum"); r != ncclSuccess) return r;
  if (op == nullptr || scalar == nullptr)
    return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL");
  if (type != ncclFloat16 && type != ncclBfloat16 && type != ncclFloat32 && type != ncclFloat64)
    return fail(comm, ncclInvalidArgument,
                "ncclRedOpCreatePreMulSum: data type " + std::to_string(static_cast<int>(type)) +
                    " is not a floating-point type (zerowire pre-multiplies half, bfloat16, float and double)");
  if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    return fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: unknown scalar residence");
  const bool on_host = residence == ncclScalarHostImmediate;
  size_t slot = 0;  // a destroyed handle's slot is reused (NCCL's handles are reused too)
  while (slot < comm->premul_type.size() && comm->premul_type[slot] != ncclNumTypes) ++slot;
  if (slot == comm->premul_type.size()) {
    comm->premul.emplace_back();
    comm->premul_device.emplace_back();
    comm->premul_type.emplace_back();
  }
  comm->premul[slot] = on_host ? scalar_value(scalar, type) : 1.0;
  comm->premul_device[slot] = on_host ? nullptr : scalar;
  comm->premul_type[slot] = type;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(slot));
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpDestroy"); r != ncclSuccess) return r;
  const long idx = static_cast<long>(op) - ncclNumOps;
  if (idx < 0 || idx >= static_cast<long>(comm->premul_type.size()) || comm->premul_type[idx] == ncclNumTypes)
    return fail(comm, ncclInvalidArgument,
                "ncclRedOpDestroy: " + std::to_string(static_cast<int>(op)) + " is not a live PreMulSum handle");
  comm->premul_type[idx] = ncclNumTypes;
  return ncclSuccess;
}

}  // extern "C"
