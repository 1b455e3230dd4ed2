// The staged device-memory engine of gpu_staged.h: pinned staging, the worker-side step tasks, stream waits on the
// flag word, completion and failure handling. What each operation stages is built elsewhere: collectives'
// chunk plans in gpu_staged_plan.cc, send/recv batches and all_to_all in gpu_staged_p2p.cc.
// Non-goals: choosing the engine (gpu_path.cc, gpu_p2p.cc).
#include "collectives/gpu/gpu_staged.h"

#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <optional>

#include "collectives/gpu/gpu_events.h"
#include "collectives/host_task.h"
#include "collectives/work.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread.h"
#include "transport/cuda_ipc/cuda_ipc_device.h"

namespace zw::internal::gpu {

using transport::cuda_ipc::cuda_status;
using transport::cuda_ipc::DeviceScope;

// The flag word streams wait on, the sticky failure and the event pool; shared by the engine, the chunk tasks on the
// worker and the Work handles (either may outlive the engine).
struct StagedShared {
  uint32_t* flag = nullptr;              // pinned, mapped: low 32 bits of the highest chunk number signalled
  CUdeviceptr flag_device = 0;           // its device address, for cuStreamWaitValue32
  std::mutex mutex;                      // guards everything below
  Status failed;                         // sticky: the first failure of a chunk, or abort()
  uint64_t issued = 0;                   // highest chunk number handed out
  uint64_t signalled = 0;                // highest chunk number written to *flag
  std::shared_ptr<EventPool> events = EventPool::create();  // completion events

  ~StagedShared() {
    if (flag != nullptr) cudaFreeHost(flag);
  }
  // Raises the flag to `chunk` (never lowers it: a late success must not undo a failure's release).
  void signal(uint64_t chunk) {
    std::lock_guard<std::mutex> lock(mutex);
    signal_locked(chunk);
  }
  void signal_locked(uint64_t chunk) {
    if (chunk <= signalled) return;
    signalled = chunk;
    std::atomic_ref<uint32_t>(*flag).store(static_cast<uint32_t>(chunk), std::memory_order_release);
  }
  // Records the first failure and releases every stream wait issued so far.
  void fail(const Status& st) {
    std::lock_guard<std::mutex> lock(mutex);
    if (failed.ok()) failed = st;
    signal_locked(issued);
  }
  Status failure() {
    std::lock_guard<std::mutex> lock(mutex);
    return failed;
  }
  // Reserves `count` chunk numbers; the first is returned. Fails with the sticky failure.
  Result<uint64_t> reserve(uint64_t count) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed.ok()) return failed;
    issued += count;
    return issued - count + 1;
  }
};

namespace {

using WaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// cuStreamWaitValue32 from the driver, looked up once (nothing links libcuda; see cuda_ipc_device.h).
Result<WaitValue32Fn> stream_wait_value32() {
  static std::once_flag once;
  static WaitValue32Fn fn = nullptr;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    void* sym = nullptr;
    cudaDriverEntryPointQueryResult found{};
    err = cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &sym, 12000, cudaEnableDefault, &found);
    if (err == cudaSuccess && found == cudaDriverEntryPointSuccess) fn = reinterpret_cast<WaitValue32Fn>(sym);
  });
  if (fn == nullptr)
    return err != cudaSuccess ? cuda_status(err, "looking up cuStreamWaitValue32 in the CUDA driver")
                              : Status(Code::kUnsupported,
                                       "the CUDA driver has no cuStreamWaitValue32 (stream memory "
                                       "operations); the staged GPU path needs a CUDA 12+ driver");
  return fn;
}

Status copy_async(const StagedCopy& c, cudaMemcpyKind kind, cudaStream_t stream, const char* what) {
  if (c.height == 0 || c.width == 0) return Status();
  cudaError_t err = c.height == 1
                        ? cudaMemcpyAsync(c.dst, c.src, c.width, kind, stream)
                        : cudaMemcpy2DAsync(c.dst, c.dpitch, c.src, c.spitch, c.width, c.height, kind, stream);
  return cuda_status(err, what);
}

// Waits on the worker for a chunk's D2H copy. Polls with a deadline instead of cudaEventSynchronize: a copy held
// behind another stream's wait (see the file comment of gpu_staged.h) must end in an error, not a hung worker.
Status wait_copied(cudaEvent_t copied, int device, double timeout_s, int rank) {
  // The worker thread has no device of its own; without this the runtime would make GPU 0 current for it (and create
  // a context there) on the first call.
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device)
    ZW_TRY(cuda_status(cudaSetDevice(device), "cudaSetDevice on the communicator's worker"));
  const Deadline deadline = Deadline::after_seconds(timeout_s);
  for (int polls = 0;; ++polls) {
    cudaError_t err = cudaEventQuery(copied);
    if (err == cudaSuccess) return Status();
    if (err != cudaErrorNotReady)
      return cuda_status(err, "rank " + std::to_string(rank) + ": the device-to-host staging copy failed");
    if (deadline.expired())
      return Status(Code::kTimeout, "rank " + std::to_string(rank) +
                                        ": the stream did not reach the staged operation (its device-to-host "
                                        "copies) within " +
                                        std::to_string(static_cast<int>(timeout_s)) +
                                        " s (work queued on the stream before the operation never finished; check "
                                        "kernels and other collectives issued on that stream)");
    if (polls < 200)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// The worker-side task of one chunk: wait for its input, run the host collective, let its sends leave the staging
// area, then raise the flag. A failure releases every stream wait (StagedShared::fail) and returns the error.
// Who runs a chunk, for the worker's waits and their messages.
struct ChunkOwner {
  int rank;          // this rank
  int device;        // its GPU
  double timeout_s;  // the operation's timeout
};

CommImpl::Task chunk_task(std::shared_ptr<StagedShared> shared, CommImpl::Task inner,
                          std::shared_ptr<cudaEvent_t> copied, MemRef staging, uint64_t chunk, ChunkOwner owner) {
  return [shared = std::move(shared), inner = std::move(inner), copied = std::move(copied), staging, chunk,
          owner](OpContext& ctx) mutable -> Status {
    Status st = [&]() -> Status {
      if (copied) ZW_TRY(wait_copied(*copied, owner.device, owner.timeout_s, owner.rank));
      ZW_TRY(ctx.registry.get(staging));  // one registration covers every chunk's slices
      ZW_TRY(inner(ctx));
      return ctx.rv.end_op();  // sources reusable: the next operation may overwrite the staging area
    }();
    if (st.ok())
      shared->signal(chunk);
    else
      shared->fail(st);
    return st;
  };
}

// Completion of one staged operation: every chunk's host op succeeded and the event after the last copy fired.
class StagedPoller final : public WorkPoller {
 public:
  StagedPoller(std::shared_ptr<cudaEvent_t> done, std::vector<Work> chunks, std::string what)
      : done_(std::move(done)), chunks_(std::move(chunks)), what_(std::move(what)) {}

  std::optional<Status> poll() override {
    for (; checked_ < chunks_.size() && chunks_[checked_].test(); ++checked_) {
      Status st = chunks_[checked_].wait();
      if (!st.ok()) return st.with_context(what_);
    }
    cudaError_t err = cudaEventQuery(*done_);
    if (err == cudaErrorNotReady) return std::nullopt;
    if (err != cudaSuccess) return cuda_status(err, what_ + ": the GPU reported an error");
    if (checked_ < chunks_.size()) return std::nullopt;  // a failure released the stream; its host op ends soon
    return Status();
  }

 private:
  std::shared_ptr<cudaEvent_t> done_;
  std::vector<Work> chunks_;  // host op of each chunk, in order
  size_t checked_ = 0;        // chunks_[0, checked_) finished successfully
  std::string what_;
};

}  // namespace

bool wants_staged_path(const CommImpl& impl) {
  const std::string& path = impl.settings().cuda_path;
  if (path != "auto") return path == "staged";
  // GPUDirect seam: where the transport can register device memory (caps().device_memory, verbs with dma-buf or
  // peermem), a third engine would move device buffers without staging; this is where it would be chosen.
  for (int p = 0; p < impl.size(); ++p)
    if (impl.host_of(p) != impl.host_of(impl.rank())) return true;
  return false;
}

StagedGpu::StagedGpu(CommImpl& impl, int device)
    : impl_(impl),
      rank_(impl.rank()),
      device_(device),
      timeout_s_(impl.settings().timeout_s),
      chunk_bytes_(impl.settings().cuda_staging_chunk) {}

Result<std::unique_ptr<GpuEngine>> StagedGpu::create(CommImpl& impl, int device, const char* purpose) {
  ZW_TRY(stream_wait_value32());
  DeviceScope scope(device);
  ZW_TRY(scope.status());
  std::unique_ptr<StagedGpu> g(new StagedGpu(impl, device));
  g->shared_ = std::make_shared<StagedShared>();
  void* flag = nullptr;
  ZW_TRY(cuda_status(cudaHostAlloc(&flag, 64, cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc(flag)"));
  g->shared_->flag = static_cast<uint32_t*>(flag);
  *g->shared_->flag = 0;
  void* dev = nullptr;
  ZW_TRY(cuda_status(cudaHostGetDevicePointer(&dev, flag, 0), "cudaHostGetDevicePointer(flag)"));
  g->shared_->flag_device = reinterpret_cast<CUdeviceptr>(dev);
  ZW_ASSIGN_OR_RETURN(g->watcher_,
                      start_thread("the staged GPU path's watcher thread", [p = g.get()] { p->watch_loop(); }));
  ZW_INFO(kCuda, "rank %d: device-memory %s staged through pinned host memory over %s (GPU %d, chunk %zu)", g->rank_,
          purpose, impl.transport_name(), device, g->chunk_bytes_);
  return std::unique_ptr<GpuEngine>(std::move(g));
}

StagedGpu::~StagedGpu() {
  DeviceScope scope(device_);  // the events below belong to this engine's GPU
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();  // the last host op has finished (the worker still runs)
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->signal_locked(shared_->issued);  // nothing of ours is left to wait for
  }
  Status st = quiesce();
  if (!st.ok()) {
    ZW_WARN(kCuda, "%s; leaking %zu bytes of pinned staging memory", st.to_string().c_str(), staging_size_);
    return;
  }
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

void StagedGpu::abort(const Status& reason) { shared_->fail(reason); }

Status StagedGpu::quiesce() {
  if (!last_done_) return Status();
  // Both waits are bounded: a stream blocked by someone else's work must not hang the caller forever.
  (void)last_chunk_.wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 2000)));
  const Deadline deadline = Deadline::after_seconds(timeout_s_);
  while (!last_chunk_.test() || cudaEventQuery(*last_done_) == cudaErrorNotReady) {
    if (deadline.expired())
      return Status(Code::kTimeout, "rank " + std::to_string(rank_) +
                                        ": the previous device-memory collective did "
                                        "not finish within " +
                                        std::to_string(static_cast<int>(timeout_s_)) +
                                        " s (its stream is blocked by other work), so its staging memory stays in use");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return Status();
}

Status StagedGpu::reserve_staging(size_t bytes) {
  if (bytes <= staging_size_) return Status();
  ZW_TRY(quiesce());  // the previous operation's copies and host ops are done with the old area
  const size_t old_size = staging_size_;
  if (staging_ != nullptr) cudaFreeHost(staging_);
  staging_ = nullptr;
  staging_size_ = 0;
  // 2 MiB multiples, and at least 5/4 of the old size: at most a quarter more than the largest operation needs, and
  // few regrowths (each waits for the previous operation) while sizes creep up.
  const size_t align = size_t{2} << 20;
  const size_t size = (std::max(bytes, old_size / 4 * 5) + align - 1) / align * align;
  void* p = nullptr;
  Status st = cuda_status(cudaHostAlloc(&p, size, cudaHostAllocPortable), "cudaHostAlloc");
  if (!st.ok())
    return st.with_context("rank " + std::to_string(rank_) + ": allocating " + std::to_string(size >> 20) +
                           " MiB of pinned staging memory for device-memory collectives (free host memory, or lower "
                           "the largest message)");
  staging_ = static_cast<std::byte*>(p);
  staging_size_ = size;
  ZW_INFO(kCuda, "rank %d: staging area grown to %zu MiB", rank_, size >> 20);
  return Status();
}

Result<Work> StagedGpu::run(const OpDesc& desc, const CollectiveOptions& o) {
  const std::string where = std::string(op_kind_name(desc.kind)) + " on rank " + std::to_string(rank_);
  StagedCopy d2d;
  auto build = [&](std::byte* staging) {
    const StagedPlan plan = plan_staged(impl_, desc, o, staging, chunk_bytes_);
    d2d = plan.d2d;
    std::vector<StagedStep> steps;
    steps.reserve(plan.chunks.size());
    for (const StagedChunk& c : plan.chunks)
      steps.push_back(StagedStep{c.desc, host_task(impl_, c.desc, c.host), {c.d2h}, {c.h2d}});
    return steps;
  };
  return submit(staging_bytes(desc, impl_.size()), build, o, where, d2d);
}

Result<Work> StagedGpu::submit(size_t bytes, const std::function<std::vector<StagedStep>(std::byte*)>& build,
                               const CollectiveOptions& o, const std::string& where, const StagedCopy& d2d) {
  Status failed = shared_->failure();
  if (!failed.ok()) return failed.with_context(where + ": the communicator's GPU path failed earlier");
  DeviceScope scope(device_);
  ZW_TRY(scope.status());
  ZW_TRY(reserve_staging(std::max<size_t>(bytes, 1)));
  std::vector<StagedStep> steps = build(staging_);  // may fill d2d (run's plan)
  if (steps.empty()) return Work();
  ZW_ASSIGN_OR_RETURN(std::shared_ptr<cudaEvent_t> done, shared_->events->get());
  ZW_ASSIGN_OR_RETURN(uint64_t first, shared_->reserve(steps.size()));
  const size_t count = steps.size();
  std::vector<Work> works;
  auto stream = static_cast<cudaStream_t>(o.stream);
  Status st = issue(o, steps, d2d, first, &works);
  if (st.ok()) st = cuda_status(cudaEventRecord(*done, stream), "cudaEventRecord");
  if (!works.empty()) {
    watch(works.back());  // also after a failure: the steps already queued still use the staging area
    last_chunk_ = works.back();
  }
  if (!st.ok()) {
    st = st.with_context(where);
    shared_->fail(st);  // releases the waits already queued; later operations fail at once
    // Only some steps reached the worker: this rank is out of step with its peers, so they are told now (the
    // communicator aborts with this reason) instead of timing out on the missing steps.
    if (!works.empty() && works.size() < count) impl_.abort(st);
    return st;
  }
  last_done_ = done;
  last_stream_ = stream;
  std::string what = where + " (staged GPU operation " + std::to_string(++ops_) + ", " + std::to_string(count) +
                     (count == 1 ? " step)" : " steps)");
  ZW_TRACE(kCuda, "%s: steps %llu..%llu issued", what.c_str(), static_cast<unsigned long long>(first),
           static_cast<unsigned long long>(first + count - 1));
  return Work(std::make_shared<WorkState>(std::make_unique<StagedPoller>(done, std::move(works), std::move(what))));
}

Status StagedGpu::issue(const CollectiveOptions& o, std::vector<StagedStep>& steps, const StagedCopy& d2d,
                        uint64_t first, std::vector<Work>* works) {
  auto stream = static_cast<cudaStream_t>(o.stream);
  if (last_done_ && last_stream_ != stream)
    ZW_TRY(cuda_status(cudaStreamWaitEvent(stream, *last_done_, 0), "ordering after the previous staged operation"));
  ZW_TRY(copy_async(d2d, cudaMemcpyDeviceToDevice, stream, "root's device-to-device copy"));
  const ChunkOwner owner{rank_, device_, o.timeout.count() > 0 ? o.timeout.count() / 1000.0 : timeout_s_};
  const MemRef staging = MemRef::host(staging_, staging_size_);
  for (size_t i = 0; i < steps.size(); ++i) {
    StagedStep& step = steps[i];
    for (const StagedCopy& c : step.d2h)
      ZW_TRY(copy_async(c, cudaMemcpyDeviceToHost, stream, "device-to-host staging copy"));
    // Recorded even without copies: the host op writes the staging area only once S has read the previous
    // operation's results out of it (a receive-only step would otherwise race the previous H2D copies).
    ZW_ASSIGN_OR_RETURN(std::shared_ptr<cudaEvent_t> copied, shared_->events->get());
    ZW_TRY(cuda_status(cudaEventRecord(*copied, stream), "cudaEventRecord"));
    CommImpl::Task task = chunk_task(shared_, std::move(step.task), std::move(copied), staging, first + i, owner);
    works->push_back(impl_.enqueue(step.desc, o.timeout, std::move(task)));
  }
  ZW_ASSIGN_OR_RETURN(WaitValue32Fn wait_value, stream_wait_value32());
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto value = static_cast<cuuint32_t>(first + i);  // cyclic >=: wraps safely (< 2^31 steps in flight)
    CUresult res =
        wait_value(reinterpret_cast<CUstream>(stream), shared_->flag_device, value, CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS)
      return Status(Code::kSystem, "cuStreamWaitValue32 failed with CUresult " + std::to_string(res) +
                                       " (stream memory operations unavailable? set ZW_CUDA_PATH=ipc on one node)");
    for (const StagedCopy& c : steps[i].h2d)
      ZW_TRY(copy_async(c, cudaMemcpyHostToDevice, stream, "host-to-device staging copy"));
  }
  return Status();
}

void StagedGpu::watch(const Work& last_chunk) {
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    newest_ = last_chunk;
    ++newest_id_;
  }
  watch_cv_.notify_all();
}

// Host ops are run in order and a failure is sticky, so waiting for the newest one sees every failure: a chunk the
// worker skipped (the communicator failed on a host collective, or was aborted) ran none of our code, and its stream
// wait is released here.
void StagedGpu::watch_loop() {
  std::unique_lock<std::mutex> lock(watch_mutex_);
  for (;;) {
    watch_cv_.wait(lock, [&] { return stopping_ || watched_id_ < newest_id_; });
    if (watched_id_ == newest_id_) return;  // stopping, and nothing left to watch
    Work work = newest_;
    const uint64_t id = newest_id_;
    lock.unlock();
    Status st = work.wait();
    if (!st.ok()) shared_->fail(st);
    lock.lock();
    watched_id_ = id;
  }
}

}  // namespace zw::internal::gpu
