// CommImpl::start_monitor: what the communicator tells its monitor at creation (kept out of comm_impl.cc, whose
// hot-path hooks are one line each).
#include "collectives/comm_impl.h"
#include "collectives/monitor/comm_monitor.h"

namespace zw::internal {

void CommImpl::start_monitor(uint32_t generation) {
  if (!settings_.monitor) return;
  monitor::MonitorSetup s;
  s.rank = rank_;
  s.size = size_;
  s.generation = generation;
  s.comm = settings_.name;
  s.transport = transport_->name();
  for (const PeerInfo& p : peers_) {
    s.hosts.push_back(p.host);
    s.pids.push_back(p.pid);
  }
  s.store = store_;
  monitor_ = monitor::CommMonitor::create(std::move(s));
  if (monitor_) rendezvous_->set_peer_links(&monitor_->links());
}

}  // namespace zw::internal
