// The tcp transport (see tcp_transport.h): options, listen/connect, memory registration. The data path lives
// in tcp_endpoint.cc, the progress thread in tcp_engine.cc and tcp_handshake.cc.
#include "transport/tcp/tcp_transport.h"

#include <algorithm>

#include "common/knobs.h"
#include "common/log.h"
#include "transport/tcp/tcp_address.h"
#include "transport/tcp/tcp_endpoint.h"
#include "transport/tcp/tcp_engine.h"
#include "transport/tcp/tcp_memory_region.h"

namespace zw::transport {
namespace {

using tcp::Engine;
using tcp::PeerState;

// Threading: listen/connect/register_memory from one thread at a time; wait_for_activity and
// peer_known_dead from any thread. Endpoints and regions may outlive the transport (they then fail).
class TcpTransport final : public Transport {
 public:
  TcpTransport(TransportOptions options, std::string listen_addr, std::shared_ptr<Engine> engine,
               std::shared_ptr<tcp::RegionTable> regions)
      : options_(std::move(options)),
        listen_addr_(std::move(listen_addr)),
        engine_(std::move(engine)),
        regions_(std::move(regions)) {}
  ~TcpTransport() override { engine_->shutdown(); }

  const char* name() const override { return "tcp"; }
  const Caps& caps() const override { return kCaps; }
  Result<std::string> listen() override;
  Result<std::unique_ptr<Endpoint>> connect(int peer_rank, const std::string& address) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(MemRef mem) override;
  void wait_for_activity(std::chrono::microseconds timeout) override { engine_->wait_for_activity(timeout); }
  bool peer_known_dead(int peer_rank, std::string* why) override { return engine_->peer_known_dead(peer_rank, why); }

 private:
  static constexpr Caps kCaps{
      tcp::TcpEndpoint::kMaxWriteBytes,  // max_write_bytes
      Message::kMaxControl,              // max_control_bytes
      false,                             // one_sided: the peer's progress thread receives
      true,                              // host_memory
      false,                             // device_memory
      true,                              // any_memory_remote
  };

  TransportOptions options_;
  std::string listen_addr_;
  std::string address_;  // set by listen()
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<tcp::RegionTable> regions_;
};

Result<std::string> TcpTransport::listen() {
  if (!address_.empty()) return address_;
  ZW_ASSIGN_OR_RETURN(net::HostPort where, tcp::choose_listen_address(listen_addr_, options_.store_address));
  ZW_ASSIGN_OR_RETURN(address_, engine_->listen(where));
  return address_;
}

Result<std::unique_ptr<Endpoint>> TcpTransport::connect(int peer_rank, const std::string& address) {
  const int rank = options_.rank;
  if (peer_rank < 0 || peer_rank >= options_.world_size || peer_rank == rank)
    return Status(Code::kInvalidArgument, "tcp connect from rank " + std::to_string(rank) + " to rank " +
                                              std::to_string(peer_rank) + ": the peer must be another rank in 0.." +
                                              std::to_string(options_.world_size - 1));
  if (!engine_->listening())
    return Status(Code::kInvalidArgument,
                  "tcp connect to rank " + std::to_string(peer_rank) + ": call listen() before connect()");
  Result<net::HostPort> where = net::parse_host_port(address);
  if (!where.ok())
    return where.status().with_context("tcp connect to rank " + std::to_string(peer_rank)).at(__FILE__, __LINE__);
  const int nconns = engine_->config().conns_per_peer;
  std::vector<net::Fd> outgoing;
  if (rank > peer_rank) {  // the higher rank of a pair connects, the lower one accepts
    for (int i = 0; i < nconns; ++i) {
      Result<net::Fd> fd = tcp::start_connect(*where, engine_->config().sockbuf);
      if (!fd.ok())
        return fd.status().with_context("tcp connect to rank " + std::to_string(peer_rank)).at(__FILE__, __LINE__);
      outgoing.push_back(std::move(fd).value());
    }
  }
  auto peer = std::make_shared<PeerState>(engine_.get(), peer_rank, address, nconns);
  ZW_TRY(engine_->add_peer(peer, std::move(outgoing)));
  return std::unique_ptr<Endpoint>(std::make_unique<tcp::TcpEndpoint>(engine_, std::move(peer)));
}

Result<std::unique_ptr<MemoryRegion>> TcpTransport::register_memory(MemRef mem) {
  if (mem.kind != MemKind::kHost)
    return Status(Code::kUnsupported, std::string("the tcp transport registers host memory only, not ") +
                                          mem_kind_name(mem.kind) + " memory; use a device-capable transport");
  if (mem.ptr == nullptr && mem.bytes > 0)
    return Status(Code::kInvalidArgument, "cannot register a null pointer of " + std::to_string(mem.bytes) + " bytes");
  return std::unique_ptr<MemoryRegion>(std::make_unique<tcp::TcpMemoryRegion>(mem, options_.rank, regions_));
}

}  // namespace

Result<std::unique_ptr<Transport>> create_tcp_transport(const TransportOptions& options) {
  return create_tcp_transport(options, TcpOptions{});
}

Result<std::unique_ptr<Transport>> create_tcp_transport(const TransportOptions& options, const TcpOptions& tcp) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return Status(Code::kInvalidArgument, "tcp transport: rank " + std::to_string(options.rank) +
                                              " is outside a world of " + std::to_string(options.world_size));
  tcp::EngineConfig config;
  config.rank = options.rank;
  config.world_size = options.world_size;
  config.job_hash = tcp::job_hash(options.job_id);
  int64_t conns = tcp.conns_per_peer > 0 ? tcp.conns_per_peer : knobs().tcp_conns_per_peer;
  if (conns < 1 || conns > tcp::kMaxConnsPerPeer) {
    ZW_WARN(kTcp, "ZW_TCP_CONNS_PER_PEER=%lld is outside 1..%d; using %d", static_cast<long long>(conns),
            tcp::kMaxConnsPerPeer, std::clamp<int>(static_cast<int>(conns), 1, tcp::kMaxConnsPerPeer));
    conns = std::clamp<int64_t>(conns, 1, tcp::kMaxConnsPerPeer);
  }
  config.conns_per_peer = static_cast<int>(conns);
  config.sockbuf = std::clamp<int64_t>(tcp.sockbuf >= 0 ? tcp.sockbuf : knobs().tcp_sockbuf, 0, INT32_MAX / 2);
  config.local_ranks = static_cast<int>(std::max<int64_t>(0, knobs().local_world_size));
  config.spin_us = std::max<int64_t>(0, knobs().tcp_spin_us);
  config.store_address = options.store_address;
  auto regions = std::make_shared<tcp::RegionTable>();
  auto engine = std::make_shared<Engine>(std::move(config), regions);
  std::string listen_addr = tcp.listen_addr.empty() ? knobs().tcp_listen_addr : tcp.listen_addr;
  return std::unique_ptr<Transport>(
      std::make_unique<TcpTransport>(options, std::move(listen_addr), std::move(engine), std::move(regions)));
}

}  // namespace zw::transport
