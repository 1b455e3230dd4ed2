#include "transport/tcp/tcp_transport.h"

namespace zw::transport {

Result<std::unique_ptr<Transport>> create_tcp_transport(const TransportOptions&) {
  return Status(Code::kUnsupported, "tcp transport not built yet");
}

}  // namespace zw::transport
