// Refused calls announced to the peers (refusal.h): the marker operation and the REFUSE control message.
#include "collectives/refusal.h"

#include <algorithm>
#include <cstring>

#include "collectives/comm_impl.h"
#include "collectives/gpu_path.h"
#include "collectives/rendezvous/rendezvous.h"
#include "collectives/rendezvous/rendezvous_wire.h"
#include "zerowire/communicator.h"

namespace zw::internal {

void announce_refusal(Communicator& comm, const Status& why, bool device) {
  if (comm.size() < 2 || why.ok()) return;
  if (device) {
    GpuEngine* engine = comm.impl().gpu_engine_if_created();
    if (engine != nullptr ? engine->refuse(why) : publish_gpu_refusal(comm, why)) return;
  }
  const std::string text = why.message();
  (void)comm.impl().enqueue(refusal_desc(), std::chrono::milliseconds(0), [text](OpContext& ctx) {
    ctx.rv.broadcast_refusal(text);
    return Status();
  });
}

void Rendezvous::broadcast_refusal(const std::string& why) {
  std::byte buf[transport::Message::kMaxControl];
  RefuseWire w{};
  w.type = kCtrlRefuse;
  w.seq = seq_;
  std::memcpy(buf, &w, sizeof w);
  // The reason's tail (it ends with what was wrong) fits one control message.
  const size_t room = sizeof buf - sizeof w;
  const std::string text = why.size() <= room ? why : "..." + why.substr(why.size() - (room - 3));
  std::memcpy(buf + sizeof w, text.data(), text.size());
  for (auto& ep : endpoints_)
    if (ep) (void)ep->send(std::span<const std::byte>(buf, sizeof w + text.size()));
}

Status Rendezvous::refused_error(int peer, uint64_t seq, const std::string& why) const {
  return Status(Code::kAborted, "operation #" + std::to_string(seq) + " (" + desc_.describe() +
                                    " here) was refused by " + describe(peer) + ": " + why);
}

Status Rendezvous::on_refusal(int peer, std::span<const std::byte> payload) {
  RefuseWire w;
  if (payload.size() < sizeof w) return Status(Code::kProtocolError, "malformed refusal from " + describe(peer));
  std::memcpy(&w, payload.data(), sizeof w);
  std::string why(reinterpret_cast<const char*>(payload.data()) + sizeof w, payload.size() - sizeof w);
  if (w.seq < seq_ || (w.seq == seq_ && is_refusal(desc_))) return Status();  // past, or refused here too
  if (w.seq == seq_) return refused_error(peer, w.seq, why);
  state_[peer].refusals.emplace_back(w.seq, std::move(why));  // for an operation this rank has not started
  return Status();
}

Status Rendezvous::check_refusals() {
  for (size_t p = 0; p < state_.size(); ++p) {
    auto& list = state_[p].refusals;
    if (list.empty()) continue;
    for (const auto& [seq, why] : list)
      if (seq == seq_ && !is_refusal(desc_)) return refused_error(static_cast<int>(p), seq, why);
    std::erase_if(list, [&](const auto& r) { return r.first <= seq_; });
  }
  return Status();
}

}  // namespace zw::internal
