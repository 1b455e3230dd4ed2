// VerbsEndpoint: argument checks in front of the connections, striping over them, and reassembling Notifies.
#include "transport/verbs/verbs_endpoint.h"

#include <algorithm>
#include <string>
#include <thread>
#include <typeinfo>

namespace zw::transport::verbs {

VerbsEndpoint::VerbsEndpoint(std::shared_ptr<const void> keepalive, std::vector<std::shared_ptr<VerbsConnection>> conns,
                             const VerbsDevice* device)
    : Endpoint(conns.at(0)->peer()),
      keepalive_(std::move(keepalive)),
      conns_(std::move(conns)),
      device_(device),
      parts_(conns_.size()) {}

VerbsEndpoint::~VerbsEndpoint() {
  for (auto& c : conns_) c->close();
}

Status VerbsEndpoint::wait_connected(Deadline deadline) {
  for (auto& c : conns_) ZW_TRY(c->wait_connected(deadline));
  return Status();
}

Status VerbsEndpoint::error() const {
  for (auto& c : conns_) {
    Status st = c->error();
    if (!st.ok()) return st;
  }
  return Status();
}

Status VerbsEndpoint::write(const MemoryRegion& local, size_t local_offset, std::span<const std::byte> remote_key,
                            size_t remote_offset, size_t bytes, uint64_t notify) {
  ZW_TRY(error());
  auto where = [this] { return "write to rank " + std::to_string(peer()) + ": "; };  // built only on errors
  // VerbsMemoryRegion is final: comparing the dynamic type is the whole check, cheaper than a dynamic_cast.
  const auto* region =
      typeid(local) == typeid(VerbsMemoryRegion) ? static_cast<const VerbsMemoryRegion*>(&local) : nullptr;
  if (region == nullptr || region->device() != device_)
    return Status(Code::kInvalidArgument,
                  where() + "the local region was not registered with this verbs transport (register_memory)");
  const MemRef& src = local.mem();
  if (local_offset > src.bytes || bytes > src.bytes - local_offset)
    return Status(Code::kInvalidArgument, where() + "local offset " + std::to_string(local_offset) + " + " +
                                              std::to_string(bytes) + " bytes exceeds the local region of " +
                                              std::to_string(src.bytes) + " bytes");
  VerbsRemoteKey key;
  if (!VerbsRemoteKey::decode(remote_key, &key))
    return VerbsRemoteKey::parse(remote_key).status().with_context("write to rank " + std::to_string(peer()))
        .at(__FILE__, __LINE__);
  if (remote_offset > key.length || bytes > key.length - remote_offset)
    return Status(Code::kRemoteAccess, where() + "remote offset " + std::to_string(remote_offset) + " + " +
                                           std::to_string(bytes) + " bytes exceeds the remote region of " +
                                           std::to_string(key.length) + " bytes");
  if (conns_.size() > 1 && bytes >= kMinStripeBytes)
    return post_striped(*region, local_offset, key, remote_offset, bytes, notify);
  ZW_TRY(conns_[0]->post_write(*region, local_offset, key, remote_offset, bytes, notify));
  if (conns_.size() > 1) {  // a single QP completes in order: writes_completed() reads its count
    targets_.push_back(conns_[0]->writes_posted());
    targets_.insert(targets_.end(), conns_.size() - 1, 0);
  }
  ++posted_;
  return Status();
}

Status VerbsEndpoint::post_striped(const VerbsMemoryRegion& local, size_t local_offset, const VerbsRemoteKey& key,
                                   size_t remote_offset, size_t bytes, uint64_t notify) {
  const size_t n = conns_.size();
  size_t part = (bytes + n - 1) / n;
  part = (part + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  uint64_t target[kMaxQpsPerConnection] = {};
  for (size_t i = 0; i < n; ++i) {
    size_t begin = std::min(bytes, i * part), len = std::min(bytes - begin, part);
    // A failure after some parts were posted leaves the write half-done; the sticky error says so to the caller.
    ZW_TRY(conns_[i]->post_write(local, local_offset + begin, key, remote_offset + begin, len, notify, true));
    target[i] = conns_[i]->writes_posted();
  }
  targets_.insert(targets_.end(), target, target + n);
  ++posted_;
  return Status();
}

uint64_t VerbsEndpoint::writes_completed() const {
  if (conns_.size() == 1) {  // every write of this endpoint went on it, and its writes complete in order
    if (conns_[0]->writes_completed() < posted_) {
      // Nothing else may be polling the CQ (a caller spinning on this counter): poll it once here.
      (void)conns_[0]->progress_and_check();
      if (conns_[0]->writes_completed() < posted_ && device_->software()) std::this_thread::yield();
    }
    completed_ = conns_[0]->writes_completed();
    return completed_;
  }
  auto front_done = [this] {
    for (size_t i = 0; i < conns_.size(); ++i)
      if (targets_[i] > conns_[i]->writes_completed()) return false;
    return true;
  };
  bool progressed = false;
  while (!targets_.empty()) {
    if (!front_done()) {
      // Nothing else may be polling the CQs (a caller spinning on this counter): poll them once here.
      if (progressed) {
        if (device_->software()) std::this_thread::yield();  // its kernel threads complete our writes
        break;
      }
      for (auto& c : conns_) (void)c->progress_and_check();
      progressed = true;
      continue;
    }
    targets_.erase(targets_.begin(), targets_.begin() + static_cast<std::ptrdiff_t>(conns_.size()));
    ++completed_;
  }
  return completed_;
}

Result<bool> VerbsEndpoint::take_complete_stripe(Message* out) {
  for (auto& q : parts_)
    if (q.empty()) return false;
  const uint64_t notify = parts_[0].front();
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (parts_[i].front() != notify) {
      std::string why = "striped write from rank " + std::to_string(peer()) + ": QP 0 delivered a part of notify " +
                        std::to_string(notify) + " but QP " + std::to_string(i) + " a part of notify " +
                        std::to_string(parts_[i].front()) + "; do both ranks run the same zerowire version?";
      return conns_[0]->fail(Status(Code::kProtocolError, why), false);
    }
    parts_[i].pop_front();
  }
  *out = Message{};
  out->kind = MessageKind::kNotify;
  out->notify = notify;
  return true;
}

Result<bool> VerbsEndpoint::poll(Message* out) {
  bool part = false;
  if (conns_.size() == 1) return conns_[0]->poll(out, &part);  // no striping: parts never come (the common case)
  Message m;
  for (;;) {
    ZW_ASSIGN_OR_RETURN(bool done, take_complete_stripe(out));
    if (done) return true;
    ZW_ASSIGN_OR_RETURN(bool got, conns_[0]->poll(&m, &part));
    if (got && !part) {
      *out = m;
      return true;
    }
    if (got) {
      parts_[0].push_back(m.notify);
      continue;
    }
    bool more = false;
    for (size_t i = 1; i < conns_.size(); ++i) {
      for (;;) {
        ZW_ASSIGN_OR_RETURN(bool got_i, conns_[i]->poll(&m, &part));
        if (!got_i) break;
        if (!part)
          return conns_[i]->fail(Status(Code::kProtocolError, "rank " + std::to_string(peer()) +
                                                                  " sent a message "
                                                                  "other than a write part on its QP " +
                                                                  std::to_string(i)),
                                 false);
        parts_[i].push_back(m.notify);
        more = true;
      }
    }
    if (!more) return take_complete_stripe(out);
  }
}

Status VerbsEndpoint::send(std::span<const std::byte> payload) {
  ZW_TRY(error());
  if (payload.size() > Message::kMaxControl)
    return Status(Code::kInvalidArgument, "control message to rank " + std::to_string(peer()) + " has " +
                                              std::to_string(payload.size()) +
                                              " bytes; the verbs transport carries at most " +
                                              std::to_string(Message::kMaxControl) + " (Caps::max_control_bytes)");
  return conns_[0]->post_control(payload);
}

}  // namespace zw::transport::verbs
