// Backend selection by name.
#include <string>

#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace zw::transport {

std::vector<std::string> available_transports() { return {"shm", "tcp"}; }

Result<std::unique_ptr<Transport>> create_transport(const std::string& name, const TransportOptions& options) {
  if (name == "shm") return create_shm_transport(options);
  if (name == "tcp") return create_tcp_transport(options);
  std::string choices;
  for (const std::string& n : available_transports()) choices += (choices.empty() ? "" : ", ") + n;
  return Status(Code::kInvalidArgument, "unknown transport '" + name + "': this build has " + choices);
}

}  // namespace zw::transport
