// VerbsEndpoint: argument checks in front of the connection.
#include "transport/verbs/verbs_endpoint.h"

#include <string>

namespace zw::transport::verbs {

VerbsEndpoint::VerbsEndpoint(std::shared_ptr<const void> keepalive, std::shared_ptr<VerbsConnection> conn,
                             const VerbsDevice* device)
    : Endpoint(conn->peer()), keepalive_(std::move(keepalive)), conn_(std::move(conn)), device_(device) {}

VerbsEndpoint::~VerbsEndpoint() { conn_->close(); }

Status VerbsEndpoint::write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                            size_t remote_offset, size_t bytes, uint64_t notify) {
  ZW_TRY(conn_->error());
  auto where = [this] { return "write to rank " + std::to_string(peer()) + ": "; };  // built only on errors
  const auto* region = dynamic_cast<const VerbsMemoryRegion*>(&local);
  if (region == nullptr || region->device() != device_)
    return Status(Code::kInvalidArgument,
                  where() + "the local region was not registered with this verbs transport (register_memory)");
  const MemRef& src = local.mem();
  if (local_offset > src.bytes || bytes > src.bytes - local_offset)
    return Status(Code::kInvalidArgument, where() + "local offset " + std::to_string(local_offset) + " + " +
                                              std::to_string(bytes) + " bytes exceeds the local region of " +
                                              std::to_string(src.bytes) + " bytes");
  auto key = VerbsRemoteKey::parse(remote_key);
  if (!key.ok()) return key.status().with_context("write to rank " + std::to_string(peer())).at(__FILE__, __LINE__);
  if (remote_offset > key->length || bytes > key->length - remote_offset)
    return Status(Code::kRemoteAccess, where() + "remote offset " + std::to_string(remote_offset) + " + " +
                                           std::to_string(bytes) + " bytes exceeds the remote region of " +
                                           std::to_string(key->length) + " bytes");
  return conn_->post_write(*region, local_offset, *key, remote_offset, bytes, notify);
}

Status VerbsEndpoint::send(std::span<const std::byte> payload) {
  ZW_TRY(conn_->error());
  if (payload.size() > Message::kMaxControl)
    return Status(Code::kInvalidArgument, "control message to rank " + std::to_string(peer()) + " has " +
                                              std::to_string(payload.size()) +
                                              " bytes; the verbs transport carries at most " +
                                              std::to_string(Message::kMaxControl) + " (Caps::max_control_bytes)");
  return conn_->post_control(payload);
}

}  // namespace zw::transport::verbs
