// tcp transport backend (scaffold; replaced by the backend's implementation).
#pragma once

#include <memory>

#include "transport/transport.h"

namespace zw::transport {

Result<std::unique_ptr<Transport>> create_tcp_transport(const TransportOptions& options);

}  // namespace zw::transport
