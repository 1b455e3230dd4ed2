// zero/engine/stream_spans.cc — marks as pooled timing events and their resolution into the timeline.
//
// Non-goals: see stream_spans.h.
#include "zero/engine/stream_spans.h"

namespace zw::zero {

Result<int> StreamSpans::mark(void* stream) {
  if (used_ == int(events_.size())) {
    ZW_ASSIGN_OR_RETURN(DeviceEvent e, device_.make_event(/*timing=*/true));
    events_.push_back(e);
  }
  ZW_TRY(device_.record(events_[size_t(used_)], stream));
  return used_++;
}

Status StreamSpans::resolve() {
  for (const Pending& p : pending_) {
    if (p.a < 0 || p.b < 0) continue;
    ZW_ASSIGN_OR_RETURN(const int64_t t0, device_.event_ns(events_[size_t(p.a)]));
    ZW_ASSIGN_OR_RETURN(const int64_t t1, device_.event_ns(events_[size_t(p.b)]));
    if (p.span >= 0)
      timeline_.device_ran(p.span, t0, t1);
    else
      timeline_.compute(p.unit, p.backward, t0, t1, /*device=*/true);
  }
  pending_.clear();
  used_ = 0;
  return device_.reanchor();
}

}  // namespace zw::zero
