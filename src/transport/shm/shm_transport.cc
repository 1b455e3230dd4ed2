// ShmTransport: segment creation, address exchange checks, registration and the activity wait.
#include "transport/shm/shm_transport.h"

#include <unistd.h>

#include <thread>

#include "common/knobs.h"
#include "transport/shm/shm_endpoint.h"
#include "transport/shm/shm_memory_region.h"

namespace zw::transport {

ShmTransport::ShmTransport(const TransportOptions& options)
    : options_(options),
      caps_{size_t{1} << 40,         Message::kMaxControl,      /*one_sided=*/false, /*host_memory=*/true,
            /*device_memory=*/false, /*any_memory_remote=*/true},
      peers_(static_cast<size_t>(options.world_size)) {}

Result<std::string> ShmTransport::listen() {
  if (!address_.empty()) return address_;
  if (options_.job_id.empty())
    return Status(Code::kInvalidArgument, "the shm transport needs TransportOptions::job_id to name its segment");
  std::string name = shm_segment_name(options_.job_id, options_.rank);
  ZW_ASSIGN_OR_RETURN(segment_, ShmSegment::create(name, options_.rank, options_.world_size));
  auto pid = static_cast<int32_t>(::getpid());
  ShmAddress address{options_.rank, pid, process_start_time(pid), name, local_host_identity()};
  address_ = address.to_string();
  segment_->unlink_if_all_attached();  // a world of one has nobody to wait for
  return address_;
}

Status ShmTransport::check_same_host(int peer_rank, const ShmAddress& address) const {
  const HostIdentity& me = local_host_identity();
  std::string peer = "rank " + std::to_string(peer_rank);
  if (address.host.hostname != me.hostname || address.host.boot_id != me.boot_id) {
    std::string theirs = address.host.hostname, mine = me.hostname;
    if (theirs == mine) {  // two machines (VMs) with one name: show what tells them apart
      theirs += " (boot id " + address.host.boot_id + ")";
      mine += " (boot id " + me.boot_id + ")";
    }
    return Status(Code::kUnsupported,
                  peer + " is on host " + theirs + " but the shm transport needs all ranks on one host (rank " +
                      std::to_string(options_.rank) + " is on host " + mine + "): use the tcp transport");
  }
  if (address.host.pid_ns != me.pid_ns)
    return Status(Code::kUnsupported,
                  peer + " runs in another pid namespace (" + address.host.pid_ns + ", rank " +
                      std::to_string(options_.rank) + " in " + me.pid_ns + ") on host " + me.hostname +
                      ": the shm transport needs all ranks in one container; use the tcp transport");
  return Status();
}

Result<std::unique_ptr<Endpoint>> ShmTransport::connect(int peer_rank, const std::string& address) {
  std::string peer = "rank " + std::to_string(peer_rank);
  if (!segment_) return Status(Code::kInvalidArgument, "connect(" + peer + ") before listen() on the shm transport");
  if (peer_rank < 0 || peer_rank >= options_.world_size || peer_rank == options_.rank)
    return Status(Code::kInvalidArgument, "cannot connect rank " + std::to_string(options_.rank) + " to " + peer +
                                              ": peers are 0.." + std::to_string(options_.world_size - 1) +
                                              " other than itself");
  if (peers_[peer_rank])
    return Status(Code::kInvalidArgument, "rank " + std::to_string(options_.rank) + " is already connected to " + peer);
  auto parsed = ShmAddress::parse(address);
  if (!parsed.ok()) return parsed.status().with_context("cannot connect to " + peer).at(__FILE__, __LINE__);
  if (parsed->rank != peer_rank)
    return Status(Code::kInvalidArgument, "the address given for " + peer + " belongs to rank " +
                                              std::to_string(parsed->rank) + ": " + address);
  ZW_TRY(check_same_host(peer_rank, *parsed));
  auto endpoint = std::make_unique<ShmEndpoint>(options_.rank, *parsed, segment_);
  ZW_TRY(endpoint->try_attach());
  peers_[peer_rank] = std::move(parsed).value();
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

Result<std::unique_ptr<MemoryRegion>> ShmTransport::register_memory(MemRef mem) { return register_shm_memory(mem); }

void ShmTransport::wait_for_activity(std::chrono::microseconds timeout) {
  if (!segment_) {
    std::this_thread::sleep_for(timeout);
    last_idle_ns_ = 0;
    return;
  }
  last_idle_ns_ = segment_->wait(timeout, knobs().shm_spin_us);
}

bool ShmTransport::peer_known_dead(int peer_rank, std::string* why) {
  if (peer_rank < 0 || peer_rank >= options_.world_size || !peers_[peer_rank]) return false;
  return process_exited(*peers_[peer_rank], why);
}

Result<std::unique_ptr<Transport>> create_shm_transport(const TransportOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return Status(Code::kInvalidArgument, "shm transport: rank " + std::to_string(options.rank) +
                                              " is not within a world of " + std::to_string(options.world_size));
  return std::unique_ptr<Transport>(new ShmTransport(options));
}

}  // namespace zw::transport
