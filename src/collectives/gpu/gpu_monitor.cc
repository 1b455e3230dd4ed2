// The device path's monitoring records (gpu_monitor.h): CUDA events per record slot, the clock anchor, completions.
#include "collectives/gpu/gpu_monitor.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "collectives/comm_impl.h"
#include "collectives/gpu/gpu_comm.h"
#include "collectives/monitor/comm_monitor.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal::gpu {
namespace {

using transport::cuda_ipc::cuda_status;
using transport::cuda_ipc::DeviceScope;

constexpr uint64_t kAnchorWindowNs = 100'000;       // an anchor seen complete within this window is kept
constexpr uint64_t kAnchorPollNs = 200'000;         // how long one attempt polls
constexpr uint64_t kAnchorRenewNs = 1'000'000'000;  // renewed this often (float ms keep ~0.1 µs within 1 s)

uint64_t ms_to_ns(float ms) { return static_cast<uint64_t>(std::llround(static_cast<double>(ms) * 1e6)); }

}  // namespace

GpuOpTimer::~GpuOpTimer() {
  for (cudaEvent_t e : start_) cudaEventDestroy(e);
  for (cudaEvent_t e : end_) cudaEventDestroy(e);
  for (cudaEvent_t e : anchor_)
    if (e != nullptr) cudaEventDestroy(e);
  if (anchor_stream_ != nullptr) cudaStreamDestroy(anchor_stream_);
}

Status GpuOpTimer::init(size_t slots) {
  DeviceScope scope(device_);
  ZW_TRY(scope.status());
  start_.reserve(slots);
  end_.reserve(slots);
  timed_.assign(slots, 1);
  done_.resize(slots);
  for (size_t i = 0; i < slots; ++i) {
    cudaEvent_t a = nullptr, b = nullptr;
    ZW_TRY(cuda_status(cudaEventCreate(&a), "cudaEventCreate (monitor)"));
    start_.push_back(a);
    ZW_TRY(cuda_status(cudaEventCreate(&b), "cudaEventCreate (monitor)"));
    end_.push_back(b);
  }
  for (cudaEvent_t& e : anchor_) ZW_TRY(cuda_status(cudaEventCreate(&e), "cudaEventCreate (monitor anchor)"));
  return cuda_status(cudaStreamCreateWithFlags(&anchor_stream_, cudaStreamNonBlocking), "cudaStreamCreate (monitor)");
}

Status GpuOpTimer::mark(cudaEvent_t e, cudaStream_t stream) {
  return cuda_status(cudaEventRecord(e, stream), "cudaEventRecord (monitor)");
}

// Records the spare anchor event on the private stream and polls it; kept when seen complete within the window.
bool GpuOpTimer::try_anchor() {
  const int spare = current_ == 0 ? 1 : 0;
  const uint64_t t0 = now_ns();
  if (cudaEventRecord(anchor_[spare], anchor_stream_) != cudaSuccess) return false;
  cudaError_t q = cudaErrorNotReady;
  uint64_t t1 = t0;
  while (q == cudaErrorNotReady && t1 - t0 < kAnchorPollNs) {
    q = cudaEventQuery(anchor_[spare]);
    t1 = now_ns();
  }
  if (q != cudaSuccess || t1 - t0 > kAnchorWindowNs) return false;
  current_ = spare;
  anchor_ns_ = t0 + (t1 - t0) / 2;
  anchored_at_ns_ = t1;
  return true;
}

void GpuOpTimer::refresh() {
  if (anchor_stream_ == nullptr) return;
  if (current_ >= 0 && now_ns() - anchored_at_ns_ < kAnchorRenewNs) return;
  DeviceScope scope(device_);
  if (!scope.status().ok()) return;
  for (int attempt = 0; attempt < 3 && !try_anchor(); ++attempt) {
  }
}

bool GpuOpTimer::reached(size_t slot, uint64_t) {
  DeviceScope scope(device_);
  const cudaError_t q = timed_[slot]  ? cudaEventQuery(end_[slot])
                        : done_[slot] ? cudaEventQuery(*done_[slot])
                                      : cudaSuccess;
  if (q == cudaErrorNotReady) return false;
  if (q != cudaSuccess && device_error_ == cudaSuccess) device_error_ = q;
  return true;
}

// An operation the device finished (reached() said so of it or of a later one): nothing to ask the device about an
// untimed one; a timed one's times from its events. An error reached() saw fails every record of that pass, as
// CUDA's sticky errors would have answered each one's own query.
monitor::DeviceCompletion GpuOpTimer::completion(size_t slot, uint64_t seq) {
  using State = monitor::DeviceCompletion::State;
  monitor::DeviceCompletion c;
  const bool timed = timed_[slot] != 0;
  std::optional<DeviceScope> scope;
  if (timed) scope.emplace(device_);
  const cudaError_t q = device_error_;
  const uint64_t seen = now_ns();
  c.state = State::kDone;
  if (q != cudaSuccess) {
    c.state = State::kFailed;
    c.code = static_cast<uint16_t>(cuda_status(q, "device operation").code());
  }
  const volatile transport::cuda_ipc::GpuHostStatus* hs = shared_->ipc->host_status();
  if (c.state == State::kDone && hs->failure != 0 && hs->seq <= seq) {
    c.state = State::kFailed;
    c.code = static_cast<uint16_t>(hs->failure == transport::cuda_ipc::kGpuTimeout ? Code::kTimeout : Code::kAborted);
  }
  if (!timed) {  // done by the time it was seen; its run time is unknown
    done_[slot].reset();
    c.timed = false;
    c.start_ns = c.end_ns = seen;
    return c;
  }
  float run_ms = 0, after_ms = 0, before_ms = 0;
  const bool elapsed = q == cudaSuccess && cudaEventElapsedTime(&run_ms, start_[slot], end_[slot]) == cudaSuccess;
  const uint64_t run = elapsed && run_ms > 0 ? ms_to_ns(run_ms) : 0;
  // The start relative to the anchor, asked both ways round: the one that is positive holds the offset (the start
  // usually precedes an anchor taken when its completion is looked for).
  if (elapsed && current_ >= 0 && cudaEventElapsedTime(&after_ms, anchor_[current_], start_[slot]) == cudaSuccess &&
      cudaEventElapsedTime(&before_ms, start_[slot], anchor_[current_]) == cudaSuccess) {
    const double offset_ms = after_ms > 0 ? after_ms : -static_cast<double>(before_ms);
    const double start = static_cast<double>(anchor_ns_) + offset_ms * 1e6;
    c.start_ns = start > 0 ? static_cast<uint64_t>(start) : 0;
  } else {
    c.start_ns = seen > run ? seen - run : 0;  // no anchor: the end is when the completion was seen
  }
  c.end_ns = c.start_ns + run;
  return c;
}

void GpuOpRecorder::attach(CommImpl& impl, int device, std::shared_ptr<GpuShared> shared) {
  monitor_ = impl.monitor();
  if (!monitor_) return;
  auto timer = std::make_shared<GpuOpTimer>(device, std::move(shared));
  monitor::DeviceOps* ops = monitor_->attach_device(timer, "cuda_ipc");
  if (ops == nullptr) return;
  Status st = timer->init(ops->capacity());
  if (!st.ok()) {
    ZW_WARN(kCuda, "device operations on rank %d are not recorded: %s", impl.rank(), st.to_string().c_str());
    monitor_->detach_device();
    return;
  }
  timer_ = std::move(timer);
  ops_ = ops;
  sample_ = static_cast<uint64_t>(std::max<int64_t>(knobs().monitor_device_sample, 1));
}

void GpuOpRecorder::detach() {
  if (ops_ != nullptr) monitor_->detach_device();
  ops_ = nullptr;
}

}  // namespace zw::internal::gpu
