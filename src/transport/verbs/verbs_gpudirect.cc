// GPUDirect RDMA detection and device-memory registration (see verbs_gpudirect.h).
#include "transport/verbs/verbs_gpudirect.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "zerowire/config.h"

#if ZW_HAVE_CUDA
#include <cuda.h>
#endif

namespace zw::transport::verbs {
namespace {

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

#if ZW_HAVE_CUDA
bool peermem_loaded() { return ::access("/sys/module/nvidia_peermem", F_OK) == 0; }

constexpr size_t kTrialBytes = size_t{2} << 20;  // the dma-buf trial allocation

// The few driver entry points used, resolved from libcuda.so.1 (versioned names where the header remaps).
struct CudaDriver {
  void* lib = nullptr;
  CUresult (*init)(unsigned int) = nullptr;
  CUresult (*device_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_release)(CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*range_handle)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long) = nullptr;
};

// Loads the driver once; null with *why filled when it is missing or incomplete.
const CudaDriver* cuda_driver(std::string* why) {
  static std::string error;
  static const CudaDriver* driver = []() -> const CudaDriver* {
    static CudaDriver d;
    d.lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (d.lib == nullptr) {
      const char* e = ::dlerror();
      error = std::string("no CUDA driver (") + (e ? e : "libcuda.so.1 not found") + ")";
      return nullptr;
    }
    auto sym = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(::dlsym(d.lib, name));
      if (*fn == nullptr && error.empty()) error = std::string("the CUDA driver lacks ") + name + " (too old?)";
    };
    sym(&d.init, "cuInit");
    sym(&d.device_count, "cuDeviceGetCount");
    sym(&d.device_get, "cuDeviceGet");
    sym(&d.ctx_retain, "cuDevicePrimaryCtxRetain");
    sym(&d.ctx_release, "cuDevicePrimaryCtxRelease_v2");
    sym(&d.ctx_set_current, "cuCtxSetCurrent");
    sym(&d.mem_alloc, "cuMemAlloc_v2");
    sym(&d.mem_free, "cuMemFree_v2");
    sym(&d.range_handle, "cuMemGetHandleForAddressRange");
    return error.empty() ? &d : nullptr;
  }();
  if (driver == nullptr && why) *why = error;
  return driver;
}

// Registers [ptr, ptr + bytes) of device memory through a dma-buf fd; the range is widened to host pages, as
// cuMemGetHandleForAddressRange requires, and the MR's iova is the device address so remote keys stay plain.
Result<ibv_mr*> reg_dmabuf(const CudaDriver& cu, ibv_pd* pd, uintptr_t ptr, size_t bytes) {
  const uintptr_t ps = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = ptr & ~(ps - 1), end = (ptr + bytes + ps - 1) & ~(ps - 1);
  int fd = -1;
  CUresult r = cu.range_handle(&fd, static_cast<CUdeviceptr>(base), end - base, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS)
    return Status(Code::kUnsupported, "cuMemGetHandleForAddressRange(DMA_BUF_FD) of " + std::to_string(end - base) +
                                          " bytes failed with CUresult " + std::to_string(static_cast<int>(r)));
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd, 0, end - base, base, fd, kAccess);
  int err = errno;
  ::close(fd);
  if (mr == nullptr) return system_error("ibv_reg_dmabuf_mr of " + std::to_string(end - base) + " bytes", err);
  return mr;
}

// Tries the dma-buf path on GPU 0 with a trial allocation; empty on success, else why not.
std::string try_dmabuf(const CudaDriver& cu, ibv_pd* pd) {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cu.device_get(&dev, 0) != CUDA_SUCCESS || cu.ctx_retain(&ctx, dev) != CUDA_SUCCESS)
    return "cannot open GPU 0's primary context";
  std::string why;
  CUdeviceptr p = 0;
  if (cu.ctx_set_current(ctx) != CUDA_SUCCESS || cu.mem_alloc(&p, kTrialBytes) != CUDA_SUCCESS) {
    why = "cannot allocate " + std::to_string(kTrialBytes) + " bytes on GPU 0";
  } else {
    auto mr = reg_dmabuf(cu, pd, static_cast<uintptr_t>(p), kTrialBytes);
    if (mr.ok()) {
      ibv_dereg_mr(*mr);
    } else {
      why = mr.status().message();
    }
    cu.mem_free(p);
  }
  cu.ctx_release(dev);
  return why;
}
#endif  // ZW_HAVE_CUDA

GpuDirectInfo detect(ibv_pd* pd) {
#if !ZW_HAVE_CUDA
  (void)pd;
  return {GpuDirectMode::kNone, "none: this build has no CUDA support (CUDA toolkit not found at configure time)"};
#else
  std::string why;
  const CudaDriver* cu = cuda_driver(&why);
  if (cu == nullptr) return {GpuDirectMode::kNone, "none: " + why};
  int count = 0;
  CUresult r = cu->init(0);
  if (r != CUDA_SUCCESS)
    return {GpuDirectMode::kNone,
            "none: cuInit failed with CUresult " + std::to_string(static_cast<int>(r)) + " (no usable GPU or driver)"};
  if (cu->device_count(&count) != CUDA_SUCCESS || count == 0) return {GpuDirectMode::kNone, "none: no GPU"};
  std::string dmabuf_why = pd ? try_dmabuf(*cu, pd) : "no RDMA protection domain to try it on";
  if (dmabuf_why.empty())
    return {GpuDirectMode::kDmaBuf, "dmabuf: ibv_reg_dmabuf_mr of a cuMemGetHandleForAddressRange fd works"};
  if (peermem_loaded())
    return {GpuDirectMode::kPeerMem, "peermem: nvidia_peermem is loaded (dma-buf failed: " + dmabuf_why + ")"};
  return {GpuDirectMode::kStaging, "staging: dma-buf failed (" + dmabuf_why +
                                       ") and nvidia_peermem is not loaded; device buffers go through pinned host "
                                       "memory (load nvidia_peermem, or use a kernel >= 5.12 with a driver that "
                                       "exports dma-buf, for GPUDirect RDMA)"};
#endif
}

}  // namespace

const char* gpudirect_mode_name(GpuDirectMode mode) {
  switch (mode) {
    case GpuDirectMode::kNone:
      return "none";
    case GpuDirectMode::kStaging:
      return "staging";
    case GpuDirectMode::kPeerMem:
      return "peermem";
    case GpuDirectMode::kDmaBuf:
      return "dmabuf";
  }
  return "?";
}

const GpuDirectInfo& detect_gpudirect(ibv_pd* pd) {
  static const GpuDirectInfo info = [pd] {
    GpuDirectInfo i = detect(pd);
    if (i.mode == GpuDirectMode::kStaging) {
      ZW_WARN(kVerbs, "GPUDirect RDMA unavailable, %s", i.detail.c_str());
    } else {
      ZW_INFO(kVerbs, "GPUDirect RDMA: %s", i.detail.c_str());
    }
    return i;
  }();
  return info;
}

Result<std::shared_ptr<VerbsRegistration>> register_device_range(const std::shared_ptr<VerbsDevice>& device, MemRef mem,
                                                                 GpuDirectMode mode) {
  const uintptr_t ptr = reinterpret_cast<uintptr_t>(mem.ptr);
  if (mem.bytes == 0) return std::make_shared<VerbsRegistration>(device, nullptr, ptr, 0);
  if (mode == GpuDirectMode::kPeerMem) {
    ibv_mr* mr = ibv_reg_mr(device->pd(), mem.ptr, mem.bytes, kAccess);
    if (mr == nullptr)
      return system_error("ibv_reg_mr of " + std::to_string(mem.bytes) + " bytes of GPU " + std::to_string(mem.device) +
                              " memory through nvidia_peermem on " + device->name(),
                          errno);
    return std::make_shared<VerbsRegistration>(device, mr, ptr, mem.bytes);
  }
#if ZW_HAVE_CUDA
  if (mode == GpuDirectMode::kDmaBuf) {
    const CudaDriver* cu = cuda_driver(nullptr);
    if (cu == nullptr) return Status(Code::kInternal, "dma-buf mode without a CUDA driver");
    auto mr = reg_dmabuf(*cu, device->pd(), ptr, mem.bytes);
    if (!mr.ok()) return mr.status().with_context("GPU " + std::to_string(mem.device) + " memory on " + device->name());
    return std::make_shared<VerbsRegistration>(device, *mr, ptr, mem.bytes);
  }
#endif
  return Status(Code::kUnsupported, std::string("the verbs transport cannot register GPU memory here (GPUDirect ") +
                                        gpudirect_mode_name(mode) + "): " + detect_gpudirect(nullptr).detail);
}

}  // namespace zw::transport::verbs
