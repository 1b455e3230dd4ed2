// zero/engine/device_none.cc — EngineDevice in builds without CUDA: create() refuses, naming the build.
//
// Non-goals: see device.h.
#include "zero/engine/device.h"

namespace zw::zero {

Result<std::unique_ptr<EngineDevice>> EngineDevice::create(int device, void*) {
  return Status(Code::kUnsupported, "zero engine: device " + std::to_string(device) +
                                        " asked for, but this build has no CUDA; rebuild with the CUDA toolkit or run "
                                        "the engine on host memory (EngineOptions::device = -1)");
}

}  // namespace zw::zero
