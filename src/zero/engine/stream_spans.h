// zero/engine/stream_spans.h — device-side timing for the engine's timeline (timeline.h): spans measured with CUDA
// events recorded on the compute and communication streams instead of host clocks.
//
// On the device path the host only queues work, so host timestamps say when work was queued, not when it ran. A
// StreamSpans records a timing event on a stream at the start and end of each span (mark()), and resolve() — called
// once the device has passed every mark (the engine calls it at step(), after its one synchronisation) — turns each
// pair into steady-clock nanoseconds (EngineDevice::event_ns: elapsed device time since an anchor event paired with a
// host time) and writes them into the timeline: a collective's run interval (Timeline::device_ran) or a unit's
// compute span (Timeline::compute). Events are pooled and reused after resolve().
// Threading: the engine's one thread. Non-goals: CUPTI, kernel-level detail (a compute span is every kernel queued
// between fetch and release).
#pragma once

#include <memory>
#include <vector>

#include "zero/engine/device.h"
#include "zero/engine/timeline.h"

namespace zw::zero {

class StreamSpans {
 public:
  StreamSpans(EngineDevice& device, Timeline& timeline) : device_(device), timeline_(timeline) {}

  // A timing event recorded on `stream` now; returns its mark id.
  Result<int> mark(void* stream);
  // Collective `span_id` (Timeline::issued) ran on the device between marks a and b.
  void collective(int span_id, int a, int b) { pending_.push_back(Pending{span_id, -1, false, a, b}); }
  // Unit `unit` computed between marks a and b.
  void compute(int unit, bool backward, int a, int b) { pending_.push_back(Pending{-1, unit, backward, a, b}); }
  // Every mark so far has completed on the device: resolve them into the timeline and recycle the events.
  Status resolve();

 private:
  struct Pending {
    int span = -1;  // collective: its timeline span
    int unit = -1;  // compute: its unit
    bool backward = false;
    int a = -1, b = -1;  // marks
  };
  EngineDevice& device_;
  Timeline& timeline_;
  std::vector<DeviceEvent> events_;  // mark id -> event (pooled)
  int used_ = 0;                     // marks handed out since the last resolve
  std::vector<Pending> pending_;
};

}  // namespace zw::zero
