#include "transport/shm/shm_transport.h"

namespace zw::transport {

Result<std::unique_ptr<Transport>> create_shm_transport(const TransportOptions&) {
  return Status(Code::kUnsupported, "shm transport not built yet");
}

}  // namespace zw::transport
