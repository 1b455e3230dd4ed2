// collectives/gpu/gpu_path.cc — run_gpu_collective (collectives/gpu_path.h) with CUDA: checks the buffers' device,
// creates the communicator's engine on first use (node-local GpuComm, or StagedGpu across hosts or when forced) and
// hands it the operation; a call refused here is announced to the peers (refusal.h).
#include "collectives/gpu_path.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "collectives/gpu/gpu_comm.h"
#include "collectives/gpu/gpu_staged.h"
#include "collectives/refusal.h"
#include "common/log.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal {
namespace {

// The store keys creation attempt `attempt` sets up through (CommImpl::gpu_engine).
std::shared_ptr<Store> setup_store(const CommImpl& impl, uint64_t attempt) {
  return std::make_shared<PrefixStore>(impl.store(), "gpu-setup/" + std::to_string(attempt) + "/");
}

// The GPU of a call with nothing to move (its pointers may be null): the engine's, else the caller's current device.
Result<int> device_of_empty_call(CommImpl& impl) {
  if (GpuEngine* e = impl.gpu_engine_if_created()) return e->device();
  int device = 0;
  ZW_TRY(transport::cuda_ipc::cuda_status(cudaGetDevice(&device), "cudaGetDevice"));
  return device;
}

}  // namespace

bool publish_gpu_refusal(Communicator& comm, const Status& why) {
  CommImpl& impl = comm.impl();
  if (gpu::wants_staged_path(impl)) return false;  // its operations take the host queue's numbers (and its marker)
  return impl.refuse_before_gpu_engine([&](uint64_t attempt) {
    Status s = gpu::GpuComm::publish_refusal(*setup_store(impl, attempt), impl.rank(), why.message());
    if (!s.ok())
      ZW_WARN(kCuda,
              "rank %d: could not tell the peers that it refused its first device-memory call (they wait "
              "until their timeout): %s",
              impl.rank(), s.to_string().c_str());
  });
}

Result<Work> run_gpu_collective(Communicator& comm, const OpDesc& desc, const CollectiveOptions& o) {
  // A call with nothing to move still meets its peers at world sizes above 1 (the descriptors are compared, nothing is
  // launched), so that a peer that passed another count fails naming this rank instead of waiting for it.
  if (desc.count == 0 && comm.size() == 1) return Work();
  const void* any = o.input.bytes > 0 && o.input.ptr ? o.input.ptr : o.output.ptr;
  // Error context, "all_reduce on rank 2", built only on an error (this path is paid per call).
  auto where = [&] { return std::string(op_kind_name(desc.kind)) + " on rank " + std::to_string(comm.rank()); };
  // A call refused here is announced to the peers, which would otherwise wait for it until their timeout.
  auto refuse = [&](const Status& s) {
    announce_refusal(comm, s, /*device=*/true);
    return s;
  };
  CommImpl& impl = comm.impl();
  auto dev = desc.count == 0 || any == nullptr ? device_of_empty_call(impl)
                                               : transport::cuda_ipc::device_of_pointer(any);  // a driver query
  if (!dev.ok()) return refuse(dev.status().with_context(where()));
  if (desc.count > 0 && o.output.bytes > 0 && o.output.ptr != nullptr && o.output.ptr != any) {
    auto d = transport::cuda_ipc::device_of_pointer(o.output.ptr);
    if (!d.ok()) return refuse(d.status().with_context(where()));
    if (d.value() != dev.value())
      return refuse(Status(Code::kInvalidArgument, where() + ": input is on GPU " + std::to_string(dev.value()) +
                                                       " but output on GPU " + std::to_string(d.value())));
  }
  ZW_ASSIGN_OR_RETURN(GpuEngine * engine, impl.gpu_engine([&](uint64_t attempt) -> Result<std::unique_ptr<GpuEngine>> {
    if (gpu::wants_staged_path(impl)) return gpu::StagedGpu::create(impl, dev.value());  // across hosts, or forced
    ZW_ASSIGN_OR_RETURN(std::unique_ptr<gpu::GpuComm> g,
                        gpu::GpuComm::create(impl, dev.value(), *setup_store(impl, attempt)));
    return std::unique_ptr<GpuEngine>(std::move(g));
  }));
  if (engine->device() != dev.value())
    return refuse(
        Status(Code::kInvalidArgument, where() + ": this communicator runs its device-memory collectives on GPU " +
                                           std::to_string(engine->device()) + " but these buffers are on GPU " +
                                           std::to_string(dev.value()) + " (use one communicator per GPU)"));
  if (o.premul != 1.0 && !engine->premultiplies())
    return refuse(Status(Code::kUnsupported,
                         where() + ": pre-multiplied sums are not implemented on the staged (cross-host) device path"));
  return engine->run(desc, o);
}

}  // namespace zw::internal
