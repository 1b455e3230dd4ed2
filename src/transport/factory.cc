// Backend selection by name.
#include <string>

#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"
#include "zerowire/config.h"
#if ZW_HAVE_VERBS
#include "transport/verbs/verbs_transport.h"
#endif

namespace zw::transport {

std::vector<std::string> available_transports() {
  std::vector<std::string> names = {"shm", "tcp"};
#if ZW_HAVE_VERBS
  names.push_back("verbs");
#endif
  return names;
}

Result<std::unique_ptr<Transport>> create_transport(const std::string& name, const TransportOptions& options) {
  if (name == "shm") return create_shm_transport(options);
  if (name == "tcp") return create_tcp_transport(options);
#if ZW_HAVE_VERBS
  if (name == "verbs") return create_verbs_transport(options);
#endif
  std::string choices;
  for (const std::string& n : available_transports()) choices += (choices.empty() ? "" : ", ") + n;
  return Status(Code::kInvalidArgument, "unknown transport '" + name + "': this build has " + choices);
}

}  // namespace zw::transport
