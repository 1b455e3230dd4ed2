// nccl/mem.cc — ncclMemAlloc/Free, buffer and window registration, and the device-API entry points.
//
// ncclMemAlloc is NCCL's allocator for device buffers; zerowire's own zw::mem_alloc is for host memory (shm peers
// map it), so device buffers come from cudaMalloc on the current device. Registration (ncclCommRegister,
// ncclCommWindowRegister) is an optional hint in NCCL: every collective works on unregistered buffers. zerowire
// needs no hint: its device path maps peers' buffers through cached CUDA IPC handles per operation and host buffers
// enter the communicator's registration cache on first use. So both calls return a handle that records the range
// (checked on deregistration) and change nothing else. The device API (ncclDevCommCreate: kernels that address
// peers through LSA/GIN/multimem windows) is not implemented: it returns ncclInvalidUsage, naming itself.
#include "nccl/nccl_internal.h"

// The opaque types behind NCCL's handles.
struct ncclWindow_vidmem {
  ncclComm* comm;
  void* buff;
  size_t size;
};

namespace {

struct Registration {
  ncclComm* comm;
  void* buff;
  size_t size;
};

}  // namespace

using zw::nccl::check_comm;
using zw::nccl::fail;

extern "C" {

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  if (cudaError_t e = cudaMalloc(ptr, size); e != cudaSuccess)
    return zw::nccl::cuda_fail(nullptr, e, "ncclMemAlloc: cudaMalloc of " + std::to_string(size) + " bytes");
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  if (cudaError_t e = cudaFree(ptr); e != cudaSuccess) return zw::nccl::cuda_fail(nullptr, e, "ncclMemFree: cudaFree");
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (ncclResult_t r = check_comm(comm, "ncclCommRegister"); r != ncclSuccess) return r;
  if (handle == nullptr || (buff == nullptr && size > 0))
    return fail(comm, ncclInvalidArgument, "ncclCommRegister: handle is NULL, or buff is NULL with size > 0");
  *handle = new Registration{comm, buff, size};
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = check_comm(comm, "ncclCommDeregister"); r != ncclSuccess) return r;
  auto* reg = static_cast<Registration*>(handle);
  if (reg == nullptr || reg->comm != comm)
    return fail(comm, ncclInvalidArgument, "ncclCommDeregister: the handle is NULL or from another communicator");
  delete reg;
  return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int flags) {
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowRegister"); r != ncclSuccess) return r;
  if (win == nullptr || (buff == nullptr && size > 0))
    return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: win is NULL, or buff is NULL with size > 0");
  if (flags != NCCL_WIN_DEFAULT && flags != NCCL_WIN_COLL_SYMMETRIC)
    return fail(comm, ncclInvalidArgument, "ncclCommWindowRegister: unknown winFlags " + std::to_string(flags));
  *win = new ncclWindow_vidmem{comm, buff, size};
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowDeregister"); r != ncclSuccess) return r;
  if (win == nullptr || win->comm != comm)
    return fail(comm, ncclInvalidArgument, "ncclCommWindowDeregister: the window is NULL or from another communicator");
  delete win;
  return ncclSuccess;
}

ncclResult_t ncclDevCommCreate(ncclComm_t comm, struct ncclDevCommRequirements const*, struct ncclDevComm*) {
  if (ncclResult_t r = check_comm(comm, "ncclDevCommCreate"); r != ncclSuccess) return r;
  return fail(comm, ncclInvalidUsage,
              "ncclDevCommCreate: NCCL's device API (kernels addressing peers through LSA, GIN or multimem windows) "
              "is not implemented by zerowire; use the host-side collectives");
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, struct ncclDevComm const*) {
  if (ncclResult_t r = check_comm(comm, "ncclDevCommDestroy"); r != ncclSuccess) return r;
  return fail(comm, ncclInvalidUsage, "ncclDevCommDestroy: zerowire never creates device communicators");
}

}  // extern "C"
