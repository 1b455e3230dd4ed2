// Engine::publish_metrics: the ZeRO-3 engine's own figures as gauges beside the collectives' metrics (README.md,
// "Monitoring"; zerowire/metrics.h), refreshed after every optimizer step. All are cumulative over the run, as
// Prometheus counters are (rates come from the scraper): gathers by kind, the time the compute thread waited for
// gathers and for reduce-scatters (the exposed communication), reduce-scatters and their bytes, the gather pool's
// size and its peak occupancy, optimizer steps and the loss scale.
// Non-goals: the hidden fractions (they need the span timeline, `zw_train --timeline`, and its end-of-run interval
// arithmetic; the trainer publishes them there), anything per operation (the collectives' own metrics are).
#include <string>
#include <vector>

#include "zero/engine/engine.h"
#include "zerowire/metrics.h"

namespace zw::zero {

void Engine::publish_metrics() const {
  const std::vector<metrics::Label> rank{{"rank", std::to_string(comm_.rank())}};
  auto with = [&](const char* name, const char* value) {
    std::vector<metrics::Label> l = rank;
    l.push_back({name, value});
    return l;
  };
  const PrefetchStats& p = prefetch_->stats();
  const GradReducerStats& g = reducer_->stats();
  const char* gathers = "ZeRO-3 parameter all-gathers issued, by kind (prefetched ahead of use, on demand, persistent)";
  metrics::set_gauge("zerowire_zero3_gathers_total", gathers, with("kind", "prefetched"), double(p.prefetched));
  metrics::set_gauge("zerowire_zero3_gathers_total", gathers, with("kind", "on_demand"), double(p.on_demand));
  metrics::set_gauge("zerowire_zero3_gathers_total", gathers, with("kind", "persistent"), double(p.persistent_gathers));
  const char* wait = "seconds the compute thread waited for ZeRO-3 communication (exposed, not hidden), by kind";
  metrics::set_gauge("zerowire_zero3_wait_seconds_total", wait, with("kind", "all_gather"), p.wait_s);
  metrics::set_gauge("zerowire_zero3_wait_seconds_total", wait, with("kind", "reduce_scatter"), g.wait_s);
  metrics::set_gauge("zerowire_zero3_reduce_scatters_total", "ZeRO-3 gradient reduce-scatters issued", rank,
                     double(g.reduces));
  metrics::set_gauge("zerowire_zero3_reduce_scatter_bytes_total", "input bytes of the ZeRO-3 gradient reduce-scatters",
                     rank, double(g.reduced_bytes));
  metrics::set_gauge("zerowire_zero3_gather_pool_buffers", "shared gather buffers of the ZeRO-3 pool", rank,
                     double(prefetch_->pool_buffers()));
  metrics::set_gauge("zerowire_zero3_gather_pool_peak_in_use",
                     "most shared ZeRO-3 gather buffers occupied at once since the start", rank,
                     double(p.peak_in_use));
  metrics::set_gauge("zerowire_zero3_optimizer_steps_total", "optimizer updates taken (overflow-skipped not counted)",
                     rank, double(steps_));
  metrics::set_gauge("zerowire_zero3_loss_scale", "the loss scale of the last step (1 without fp16)", rank,
                     step_loss_scale_);
}

}  // namespace zw::zero
