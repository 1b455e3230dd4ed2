// CUDA device description and driver-API pointer queries (see cuda_ipc_device.h).
#include "transport/cuda_ipc/cuda_ipc_device.h"

#include <cuda.h>

#include <cstdio>
#include <mutex>

namespace zw::transport::cuda_ipc {
namespace {

using PointerGetAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes from the driver, looked up once.
Result<PointerGetAttributesFn> pointer_get_attributes() {
  static std::once_flag once;
  static PointerGetAttributesFn fn = nullptr;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    void* sym = nullptr;
    cudaDriverEntryPointQueryResult found{};
    err = cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &sym, 12000, cudaEnableDefault, &found);
    if (err == cudaSuccess && found == cudaDriverEntryPointSuccess) fn = reinterpret_cast<PointerGetAttributesFn>(sym);
  });
  if (fn == nullptr)
    return err != cudaSuccess ? cuda_status(err, "looking up cuPointerGetAttributes in the CUDA driver")
                              : Status(Code::kUnsupported, "the CUDA driver has no cuPointerGetAttributes");
  return fn;
}

}  // namespace

Status cuda_status(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return Status();
  cudaGetLastError();  // the runtime keeps launch errors sticky in the last-error slot; take it out
  return Status(Code::kSystem, std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

Result<CudaDeviceInfo> describe_cuda_device(int ordinal) {
  cudaDeviceProp prop{};
  ZW_TRY(cuda_status(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties(" + std::to_string(ordinal) + ")"));
  CudaDeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  char bus[32] = {};
  std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  info.pci_bus_id = bus;
  const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  char text[64] = {};
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  info.uuid = text;
  return info;
}

Result<int> device_of_pointer(const void* ptr) {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) return cuda_status(err, "cudaPointerGetAttributes");
  if (attr.type != cudaMemoryTypeDevice)
    return Status(Code::kInvalidArgument, "pointer is not CUDA device memory (cudaMemoryType " +
                                              std::to_string(static_cast<int>(attr.type)) + ")");
  return attr.device;
}

Result<AllocationRange> allocation_of(const void* ptr) {
  ZW_ASSIGN_OR_RETURN(PointerGetAttributesFn get, pointer_get_attributes());
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long id = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* data[] = {&start, &size, &id};
  CUresult res = get(3, attrs, data, reinterpret_cast<CUdeviceptr>(ptr));
  if (res != CUDA_SUCCESS || start == 0)
    return Status(Code::kInvalidArgument, "cuPointerGetAttributes failed with CUresult " + std::to_string(res) +
                                              ": the pointer is not inside a CUDA allocation of this process");
  return AllocationRange{static_cast<uintptr_t>(start), size, static_cast<uint64_t>(id)};
}

}  // namespace zw::transport::cuda_ipc
