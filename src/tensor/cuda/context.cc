// tensor/cuda/context.cc — CudaContext: stream, cuBLASLt handle, workspace, scratch and error slot; the current
// context per thread; device memory with the process-wide counters behind cuda_bytes_in_use/peak.
//
// Non-goals: see cuda_context.h.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "common/knobs.h"
#include "tensor/cuda/context_impl.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_ops.h"

namespace zw::tensor {
namespace {

thread_local CudaContext* g_current = nullptr;
std::atomic<size_t> g_in_use{0};
std::atomic<size_t> g_peak{0};

// The value of `knob` = `want` among `choices` (name, value), or an error listing the names.
template <typename E>
Result<E> from_knob(const char* knob, const std::string& want,
                    std::initializer_list<std::pair<const char*, E>> choices) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (want == name) return value;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return Status(Code::kInvalidArgument, std::string("cuda context: ") + knob + "=" + want + " is not one of " + names);
}

// The options' kernel choices, the knobs' where an option says kFromKnob.
Status resolve_choices(const CudaContextOptions& o, CudaContext::Impl& m) {
  const Knobs& k = knobs();
  m.attention = o.attention;
  if (m.attention == AttentionKernels::kFromKnob) {
    ZW_ASSIGN_OR_RETURN(m.attention, from_knob<AttentionKernels>("ZW_CUDA_ATTENTION", k.cuda_attention,
                                                                 {{"auto", AttentionKernels::kAuto},
                                                                  {"cudnn", AttentionKernels::kCudnn},
                                                                  {"zw", AttentionKernels::kZerowire}}));
  }
  m.loss_rows = o.loss_rows;
  if (m.loss_rows == LossRows::kFromKnob) {
    ZW_ASSIGN_OR_RETURN(m.loss_rows,
                        from_knob<LossRows>("ZW_CUDA_LOSS_ROWS", k.cuda_loss_rows,
                                            {{"staged", LossRows::kStaged}, {"two-pass", LossRows::kTwoPass}}));
  }
  m.determinism = o.determinism;
  if (m.determinism == Determinism::kFromKnob) {
    ZW_ASSIGN_OR_RETURN(m.determinism,
                        from_knob<Determinism>("ZW_CUDA_DETERMINISTIC", std::to_string(k.cuda_deterministic),
                                               {{"1", Determinism::kDeterministic}, {"0", Determinism::kAllowFaster}}));
  }
  return Status();
}

void count_alloc(size_t bytes) {
  const size_t now = g_in_use.fetch_add(bytes) + bytes;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

const char* error_op(int32_t code) {
  switch (code) {
    case kDeviceErrorTokenOutOfRange:
      return "embedding_forward: token";
    case kDeviceErrorTargetOutOfRange:
      return "cross_entropy: target";
    default:
      return "a CUDA kernel: bad value";
  }
}

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error of anything later
    return 0;
  }
  return n;
}
size_t cuda_bytes_in_use() { return g_in_use.load(); }
size_t cuda_bytes_peak() { return g_peak.load(); }
void cuda_reset_peak() { g_peak.store(g_in_use.load()); }

CudaContext::CudaContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaContext::~CudaContext() {
  Impl& m = *impl_;
  cudaSetDevice(m.device);
  if (m.stream != nullptr) cudaStreamSynchronize(m.stream);
  m.blas_plans.reset();
  m.dnn.reset();
  if (m.blas != nullptr) cublasLtDestroy(m.blas);
  cuda::device_free(m.workspace, m.workspace_bytes, m.device);
  cuda::device_free(m.scratch, m.scratch_bytes, m.device);
  if (m.error_host != nullptr) cudaFreeHost(m.error_host);
  for (cudaEvent_t e : m.upload_done)
    if (e != nullptr) cudaEventDestroy(e);
  for (const Impl::ProfileMark& mark : m.marks) cudaEventDestroy(mark.start), cudaEventDestroy(mark.stop);
  for (cudaEvent_t e : m.spare_events) cudaEventDestroy(e);
  if (m.upload_ring != nullptr) cudaFreeHost(m.upload_ring);
  if (m.own_stream && m.stream != nullptr) cudaStreamDestroy(m.stream);
}

Result<std::unique_ptr<CudaContext>> CudaContext::create(const CudaContextOptions& o) {
  const int n = cuda_device_count();
  if (o.device < 0 || o.device >= n)
    return Status(Code::kInvalidArgument, "cuda context: device " + std::to_string(o.device) + " does not exist (" +
                                              std::to_string(n) + " CUDA device(s) visible)");
  std::unique_ptr<CudaContext> ctx(new CudaContext(std::make_unique<Impl>()));
  Impl& m = *ctx->impl_;
  m.device = o.device;
  ZW_TRY(resolve_choices(o, m));
  ZW_CUDA_TRY(cudaSetDevice(o.device));
  ZW_CUDA_TRY(cudaDeviceGetAttribute(&m.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, o.device));
  if (o.stream != nullptr) {
    m.stream = static_cast<cudaStream_t>(o.stream);
  } else {
    ZW_CUDA_TRY(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
    m.own_stream = true;
  }
  if (cublasLtCreate(&m.blas) != CUBLAS_STATUS_SUCCESS)
    return Status(Code::kSystem, "cuda context: cublasLtCreate failed on device " + std::to_string(o.device));
  ZW_ASSIGN_OR_RETURN(m.workspace, cuda::device_alloc(o.blas_workspace_bytes, o.device));
  m.workspace_bytes = o.blas_workspace_bytes;
  ZW_ASSIGN_OR_RETURN(m.scratch, cuda::device_alloc(o.scratch_bytes, o.device));
  m.scratch_bytes = o.scratch_bytes;
  void* slot = nullptr;
  ZW_CUDA_TRY(cudaHostAlloc(&slot, sizeof(DeviceError), cudaHostAllocMapped));
  m.error_host = static_cast<DeviceError*>(slot);
  *m.error_host = DeviceError{};
  void* dev = nullptr;
  ZW_CUDA_TRY(cudaHostGetDevicePointer(&dev, slot, 0));
  m.error_device = static_cast<DeviceError*>(dev);
  void* ring = nullptr;
  ZW_CUDA_TRY(cudaHostAlloc(&ring, Impl::kUploadSlots * Impl::kUploadSlotBytes, cudaHostAllocDefault));
  m.upload_ring = static_cast<std::byte*>(ring);
  for (cudaEvent_t& e : m.upload_done) ZW_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return ctx;
}

int CudaContext::device() const { return impl_->device; }
void* CudaContext::stream() const { return impl_->stream; }
AttentionKernels CudaContext::attention() const { return impl_->attention; }
LossRows CudaContext::loss_rows() const { return impl_->loss_rows; }
Determinism CudaContext::determinism() const { return impl_->determinism; }
MemRef CudaContext::scratch() const {
  return MemRef{impl_->scratch, impl_->scratch_bytes, MemKind::kCudaDevice, impl_->device};
}
DeviceError* CudaContext::error_slot() const { return impl_->error_device; }

Status CudaContext::reserve_scratch(size_t bytes) {
  Impl& m = *impl_;
  if (bytes <= m.scratch_bytes) return Status();
  ZW_CUDA_TRY(cudaSetDevice(m.device));
  ZW_CUDA_TRY(cudaStreamSynchronize(m.stream));
  ZW_ASSIGN_OR_RETURN(void* grown, cuda::device_alloc(bytes, m.device));
  cuda::device_free(m.scratch, m.scratch_bytes, m.device);
  m.scratch = grown;
  m.scratch_bytes = bytes;
  return Status();
}

Status CudaContext::synchronize() {
  ZW_CUDA_TRY(cudaStreamSynchronize(impl_->stream));
  volatile DeviceError* e = impl_->error_host;
  if (e->code == kDeviceErrorNone) return Status();
  const DeviceError got{e->code, 0, e->index, e->value, e->limit};
  e->code = kDeviceErrorNone;
  return Status(Code::kInvalidArgument, std::string(error_op(got.code)) + " " + std::to_string(got.value) +
                                            " at position " + std::to_string(got.index) +
                                            " is outside the vocabulary [0, " + std::to_string(got.limit) + ")");
}

CudaContext* current_cuda_context() { return g_current; }

void CudaContext::set_profiling(bool on) { impl_->profiling = on; }
bool CudaContext::profiling() const { return impl_->profiling; }

Status CudaContext::profile_collect() {
  Impl& m = *impl_;
  for (const Impl::ProfileMark& mark : m.marks) {
    float ms = 0;
    ZW_CUDA_TRY(cudaEventElapsedTime(&ms, mark.start, mark.stop));
    Impl::ProfileRow& row = m.profile[mark.name];
    ++row.calls;
    row.ms += ms;
    m.spare_events.push_back(mark.start);
    m.spare_events.push_back(mark.stop);
  }
  m.marks.clear();
  return Status();
}

std::string CudaContext::profile_table(int64_t steps) const {
  double total = 0;
  for (const auto& [name, row] : impl_->profile) total += row.ms;
  std::vector<std::pair<std::string, Impl::ProfileRow>> rows(impl_->profile.begin(), impl_->profile.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  const double per = steps > 0 ? double(steps) : 1.0;
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %10s %12s %8s\n", "op (device time)", "calls/step", "ms/step", "share");
  out += line;
  for (const auto& [name, row] : rows) {
    std::snprintf(line, sizeof line, "%-28s %10.1f %12.3f %7.1f%%\n", name.c_str(), double(row.calls) / per,
                  row.ms / per, total > 0 ? 100.0 * row.ms / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-28s %10s %12.3f\n", "total", "", total / per);
  return out + line;
}

ProfileRange::ProfileRange(const char* name) {
  CudaContext* ctx = current_cuda_context();
  if (ctx == nullptr || !ctx->profiling()) return;
  CudaContext::Impl& m = ctx->impl();
  cudaEvent_t ev[2] = {nullptr, nullptr};
  for (cudaEvent_t& e : ev) {
    if (!m.spare_events.empty()) {
      e = m.spare_events.back();
      m.spare_events.pop_back();
    } else if (cudaEventCreate(&e) != cudaSuccess) {
      return;  // profiling is best effort: no event, no mark
    }
  }
  cudaEventRecord(ev[0], m.stream);
  slot_ = int(m.marks.size());
  m.marks.push_back(CudaContext::Impl::ProfileMark{name, ev[0], ev[1]});
  context_ = ctx;
}

ProfileRange::~ProfileRange() {
  if (context_ == nullptr) return;
  CudaContext::Impl& m = context_->impl();
  cudaEventRecord(m.marks[size_t(slot_)].stop, m.stream);
}

CudaScope::CudaScope(CudaContext& context) : previous_(g_current) {
  g_current = &context;
  cudaSetDevice(context.device());
}
CudaScope::~CudaScope() {
  g_current = previous_;
  if (previous_ != nullptr) cudaSetDevice(previous_->device());
}

namespace cuda {

Result<void*> device_alloc(size_t bytes, int device) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  int prev = 0;
  ZW_CUDA_TRY(cudaGetDevice(&prev));
  ZW_CUDA_TRY(cudaSetDevice(device));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  cudaSetDevice(prev);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return Status(Code::kOutOfMemory, "cannot allocate " + std::to_string(bytes) + " bytes on CUDA device " +
                                          std::to_string(device) + " (" + std::to_string(free_b >> 20) + " MiB free of " +
                                          std::to_string(total_b >> 20) + " MiB)");
  }
  if (err != cudaSuccess) return cuda_status("cudaMalloc", err);
  count_alloc(bytes);
  return p;
}

void device_free(void* ptr, size_t bytes, int device) {
  if (ptr == nullptr) return;
  int prev = 0;
  cudaGetDevice(&prev);
  cudaSetDevice(device);
  cudaFree(ptr);
  cudaSetDevice(prev);
  g_in_use.fetch_sub(bytes);
}

Status zero(MemRef mem) {
  if (mem.bytes == 0) return Status();
  if (CudaContext* ctx = current_cuda_context(); ctx != nullptr && ctx->device() == mem.device) {
    ZW_CUDA_TRY(cudaMemsetAsync(mem.ptr, 0, mem.bytes, ctx->impl().stream));
    return Status();
  }
  int prev = 0;
  ZW_CUDA_TRY(cudaGetDevice(&prev));
  ZW_CUDA_TRY(cudaSetDevice(mem.device));
  const cudaError_t err = cudaMemset(mem.ptr, 0, mem.bytes);
  cudaSetDevice(prev);
  if (err != cudaSuccess) return cuda_status("cudaMemset", err);
  return Status();
}

Status copy(const Tensor& dst, const Tensor& src) {
  CudaContext::Impl& m = current();
  cudaStream_t s = m.stream;
  if (src.on_host() && !dst.on_host() && src.bytes() <= CudaContext::Impl::kUploadSlotBytes) {
    const int slot = m.upload_next;
    m.upload_next = (slot + 1) % CudaContext::Impl::kUploadSlots;
    ZW_CUDA_TRY(cudaEventSynchronize(m.upload_done[slot]));  // the slot's previous copy has left it
    std::byte* staged = m.upload_ring + size_t(slot) * CudaContext::Impl::kUploadSlotBytes;
    std::memcpy(staged, src.mem.ptr, src.bytes());
    ZW_CUDA_TRY(cudaMemcpyAsync(dst.mem.ptr, staged, src.bytes(), cudaMemcpyHostToDevice, s));
    ZW_CUDA_TRY(cudaEventRecord(m.upload_done[slot], s));
    return Status();
  }
  if (src.on_host() || dst.on_host() || src.mem.device == dst.mem.device) {
    ZW_CUDA_TRY(cudaMemcpyAsync(dst.mem.ptr, src.mem.ptr, src.bytes(), cudaMemcpyDefault, s));
  } else {
    ZW_CUDA_TRY(cudaMemcpyPeerAsync(dst.mem.ptr, dst.mem.device, src.mem.ptr, src.mem.device, src.bytes(), s));
  }
  if (dst.on_host()) ZW_CUDA_TRY(cudaStreamSynchronize(s));
  return Status();
}

}  // namespace cuda
}  // namespace zw::tensor
