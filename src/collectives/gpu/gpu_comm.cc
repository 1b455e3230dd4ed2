// The node-local device-memory engine of gpu_comm.h (run_gpu_collective, which picks it, is in gpu_path.cc).
#include "collectives/gpu/gpu_comm.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "collectives/gpu/gpu_exchange.h"
#include "collectives/gpu/gpu_poller.h"
#include "collectives/work.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"

namespace zw::internal::gpu {
namespace {

using transport::cuda_ipc::cuda_status;
using transport::cuda_ipc::CudaIpcOptions;
using transport::cuda_ipc::CudaIpcTransport;
using transport::cuda_ipc::DeviceScope;
using transport::cuda_ipc::GpuHostStatus;

// Where rank 0 publishes the shared-memory name prefix of the engine's mailboxes.
constexpr const char* kPrefixKey = "gpu-prefix";

std::string random_token() {
  std::random_device rd;
  char buf[24];
  std::snprintf(buf, sizeof buf, "zw%08x%08x", rd(), rd());
  return buf;
}

// The element range [lo, hi) of rank r's part of an all-reduce: whole 16-byte vectors, spread evenly.
void part_of(int r, int n, size_t count, size_t elem, size_t* lo, size_t* hi) {
  const size_t unit = elem >= 16 ? 1 : 16 / elem, units = (count + unit - 1) / unit;
  const size_t per = units / n, extra = units % n, ru = static_cast<size_t>(r);
  const size_t first = ru * per + std::min(ru, extra), last = first + per + (ru < extra ? 1 : 0);
  *lo = std::min(count, first * unit);
  *hi = std::min(count, last * unit);
}

}  // namespace

Status GpuComm::publish_refusal(Store& store, int rank, const std::string& why) {
  if (rank == 0) ZW_TRY(store.set(kPrefixKey, CudaIpcTransport::refusal_value(why)));
  return CudaIpcTransport::publish_refusal(store, rank, why);
}

Result<std::unique_ptr<GpuComm>> GpuComm::create(CommImpl& impl, int device, Store& store) {
  const Knobs& k = knobs();
  // Before the rendezvous below: once any rank of this process is past it, every kernel is loaded here.
  Status loaded = preload_kernels(device);
  if (!loaded.ok()) return loaded.with_context("setting up device-memory collectives on rank " +
                                               std::to_string(impl.rank()));
  std::unique_ptr<GpuComm> g(new GpuComm(impl.rank(), impl.size(), device, impl.settings().timeout_s));
  std::string prefix;
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(g->timeout_s_ * 1000));
  if (g->rank_ == 0) {
    prefix = random_token();
    ZW_TRY(store.set(kPrefixKey, prefix));
  } else {
    ZW_ASSIGN_OR_RETURN(prefix, store.get(kPrefixKey, timeout));
    ZW_TRY(CudaIpcTransport::check_refusal(0, prefix));
  }
  CudaIpcOptions opts{g->rank_, g->size_, device, prefix, g->timeout_s_, static_cast<size_t>(k.cuda_ipc_cache)};
  g->shared_ = std::make_shared<GpuShared>();
  auto ipc = CudaIpcTransport::create(store, opts);
  if (!ipc.ok()) return ipc.status().with_context("setting up device-memory collectives on rank " +
                                                  std::to_string(g->rank_));
  g->shared_->ipc = std::move(ipc).value();
  for (int p = 0; p < g->size_; ++p)
    for (int q = p + 1; q < g->size_; ++q) {
      const transport::cuda_ipc::NodePeer &a = g->shared_->ipc->peer(p), &b = g->shared_->ipc->peer(q);
      if (a.host != b.host || a.pid != b.pid || a.uuid != b.uuid) continue;
      g->sharers_.emplace_back(p, q);
      g->describe_stream_ = g->describe_stream_ || p == g->rank_ || q == g->rank_;
    }
  g->threads_ = static_cast<int>(std::clamp<int64_t>(k.cuda_threads / 32 * 32, 64, 1024));
  const int fit = std::max(1, g->shared_->ipc->device().sm_count / g->shared_->ipc->ranks_on_device());
  // Measured on 2×H200 (docs/PERF.md): every SM moving data gives 330-360 GB/s at 1 GiB, 32 blocks 260-320.
  const int64_t blocks = impl.settings().cuda_blocks;  // CommConfig::cuda_blocks, else ZW_CUDA_BLOCKS
  g->max_blocks_ = blocks > 0 ? static_cast<int>(std::min<int64_t>(blocks, fit)) : fit;
  if (k.cuda_algo != "auto" && k.cuda_algo != "direct" && k.cuda_algo != "ring")
    return Status(Code::kInvalidArgument, "ZW_CUDA_ALGO=" + k.cuda_algo + " is not one of auto, direct, ring");
  g->ring_ = k.cuda_algo == "ring";
  if (g->ring_ && g->size_ > 1) {  // the reduce-scatter slot, here rather than in the first one's issue path
    DeviceScope scope(device);
    ZW_TRY(scope.status());
    ZW_TRY(g->ensure_scratch(1));
  }
  g->ce_bytes_ = k.cuda_ce_bytes > 0 ? static_cast<size_t>(k.cuda_ce_bytes) : SIZE_MAX;
  g->oneshot_bytes_ = static_cast<size_t>(std::max<int64_t>(k.cuda_oneshot_bytes, 0));
  g->recorder_.attach(impl, device, g->shared_);
  return g;
}

GpuComm::~GpuComm() {
  if (last_event_) {
    // Wait for the last kernel (it may use the mappings); a dead peer makes it stop through the abort word.
    Deadline deadline = Deadline::after_seconds(timeout_s_);
    while (cudaEventQuery(*last_event_) == cudaErrorNotReady && !deadline.expired()) {
      for (int p = 0; p < size_; ++p)
        if (!shared_->ipc->peer_alive(p).ok()) shared_->ipc->host_status()->abort = 1;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  for (void* p : retired_scratch_) cudaFree(p);
  for (cudaStream_t side : side_streams_) cudaStreamDestroy(side);
  for (cudaEvent_t e : joins_) cudaEventDestroy(e);
  if (fork_ != nullptr) cudaEventDestroy(fork_);
}

void GpuComm::abort(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->failed.ok()) shared_->failed = reason;
  }
  shared_->ipc->host_status()->abort = 1;
}

bool GpuComm::refuse(const Status& why) {
  shared_->ipc->mailbox().post_refusal(++seq_, why.message());
  return true;
}

Status GpuComm::fail(Status status) {
  abort(status);
  return status;
}

int GpuComm::blocks_for(size_t bytes) const {
  const size_t per_block = static_cast<size_t>(threads_) * 16 * 4;  // four 16-byte vectors per thread
  return static_cast<int>(std::clamp<size_t>((bytes + per_block - 1) / per_block, 1, max_blocks_));
}

bool GpuComm::use_ring(const OpDesc& desc, const CollectiveOptions& o) const {
  if (!ring_ || size_ < 2 || o.premul != 1.0) return false;  // pre-multiplied sums: direct only
  const size_t block = desc.count * dtype_size(desc.dtype);
  switch (desc.kind) {
    case OpKind::kAllGather: return true;
    case OpKind::kReduceScatter: return o.output.ptr != o.input.data() + rank_ * block;  // in place: direct
    case OpKind::kAllReduce: return o.input.ptr != o.output.ptr;                          // in place: direct
    default: return false;
  }
}

Status GpuComm::ensure_scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return Status();
  size_t want = size_t{1} << 20;  // powers of two from 1 MiB: few reallocations (each is a new peer mapping)
  while (want < bytes) want *= 2;
  void* grown = nullptr;
  ZW_TRY(cuda_status(cudaMalloc(&grown, want), "allocating " + std::to_string(want) + " bytes of ring scratch"));
  // The old slot stays allocated (earlier kernels may still use it) and is freed with the engine: cudaFree would wait
  // for the whole device, where a peer's kernel can be spinning for this rank's next launch. All of them together are
  // smaller than the current one.
  if (scratch_ != nullptr) retired_scratch_.push_back(scratch_);
  scratch_ = grown;
  scratch_bytes_ = want;
  return Status();
}

Status GpuComm::build(const OpDesc& desc, const CollectiveOptions& o, const Peers& peers, DirectArgs* a) const {
  const size_t es = dtype_size(desc.dtype), n = static_cast<size_t>(size_), r = static_cast<size_t>(rank_);
  const bool avg = desc.op == ReduceOp::kAvg;
  a->count = desc.count;
  if (o.premul != 1.0) {
    a->premultiply = true;
    a->premul = o.premul;
  }
  switch (desc.kind) {
    case OpKind::kAllGather:
      a->src[a->nsrc++] = o.input.ptr;
      for (size_t p = 0; p < n; ++p) {
        std::byte* dst = peers.out[p] + r * desc.count * es;
        if (p == r && dst == o.input.ptr) continue;  // in place: already there
        a->dst[a->ndst++] = dst;
      }
      break;
    case OpKind::kReduceScatter:
      for (size_t p = 0; p < n; ++p) a->src[a->nsrc++] = peers.in[p] + r * desc.count * es;
      a->dst[a->ndst++] = o.output.ptr;
      if (avg) a->scale = 1.0 / static_cast<double>(n);
      break;
    case OpKind::kAllReduce: {
      if (peers.oneshot) {  // every rank reads every input whole and sums it into its own output: one NVLink trip
        for (size_t p = 0; p < n; ++p) a->src[a->nsrc++] = peers.in[p];
        a->dst[a->ndst++] = o.output.ptr;
        if (avg) a->scale = 1.0 / static_cast<double>(n);
        break;
      }
      size_t lo = 0, hi = 0;
      part_of(rank_, size_, desc.count, es, &lo, &hi);
      a->count = hi - lo;
      for (size_t p = 0; p < n; ++p) {
        a->src[a->nsrc++] = peers.in[p] + lo * es;
        a->dst[a->ndst++] = peers.out[p] + lo * es;
      }
      if (avg) a->scale = 1.0 / static_cast<double>(n);
      if (a->count == 0) a->nsrc = a->ndst = 0;
      break;
    }
    case OpKind::kBroadcast:
      if (static_cast<int>(desc.root) == rank_ && o.input.ptr == o.output.ptr) break;  // root in place: nothing
      a->src[a->nsrc++] = peers.in[desc.root];
      a->dst[a->ndst++] = o.output.ptr;
      break;
    case OpKind::kReduce:
      if (static_cast<int>(desc.root) != rank_) break;  // barriers only: the root reads this rank's input
      for (size_t p = 0; p < n; ++p) a->src[a->nsrc++] = peers.in[p];
      a->dst[a->ndst++] = o.output.ptr;
      if (avg) a->scale = 1.0 / static_cast<double>(n);
      break;
    case OpKind::kAllToAll:  // pairwise: my input's block p goes to rank p's output at my block
      a->pairwise = true;
      for (size_t p = 0; p < n; ++p) {
        a->src[a->nsrc++] = o.input.data() + p * desc.count * es;
        a->dst[a->ndst++] = peers.out[p] + r * desc.count * es;
      }
      break;
    case OpKind::kBarrier:
    case OpKind::kSendRecv:  // not routed here (gpu_p2p.cc stages send/recv batches)
      break;
  }
  return Status();
}

void GpuComm::build_ring(const OpDesc& desc, const CollectiveOptions& o, const Peers& peers, RingArgs* a) const {
  const size_t es = dtype_size(desc.dtype);
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  a->kind = desc.kind == OpKind::kAllGather       ? RingKind::kAllGather
            : desc.kind == OpKind::kReduceScatter ? RingKind::kReduceScatter
                                                  : RingKind::kAllReduce;
  a->rank = rank_;
  a->size = size_;
  a->in = o.input.ptr;
  a->out = o.output.ptr;
  a->scratch = scratch_;
  a->right_out = peers.out[right];
  a->right_scratch = peers.scratch[right];
  for (int b = 0; b <= size_; ++b) {
    if (desc.kind == OpKind::kAllReduce) {
      size_t lo = 0, hi = 0;
      part_of(b < size_ ? b : size_ - 1, size_, desc.count, es, &lo, &hi);
      a->offsets[b] = b < size_ ? lo : hi;
    } else {
      a->offsets[b] = static_cast<size_t>(b) * desc.count;
    }
  }
  if (desc.op == ReduceOp::kAvg) a->scale = 1.0 / static_cast<double>(size_);
  CudaIpcTransport& ipc = *shared_->ipc;
  a->mine = ipc.signals();
  a->right = ipc.peer(right).signals;
  a->left = ipc.peer(left).signals;
  a->status = ipc.host_status_device();
}

Result<Work> GpuComm::run(const OpDesc& desc, const CollectiveOptions& o) {
  const int64_t enqueue = static_cast<int64_t>(now_ns());
  const bool ring = use_ring(desc, o);
  const bool ce = (desc.kind == OpKind::kAllGather && size_ > 1 && desc.count * dtype_size(desc.dtype) >= ce_bytes_) ||
                  (size_ == 1 && o.premul == 1.0);  // world size 1: a copy (or nothing), see issue_alone
  const auto algo = ring ? monitor::DeviceAlgo::kRing
                    : ce ? monitor::DeviceAlgo::kCopyEngine
                         : monitor::DeviceAlgo::kDirect;
  const bool idle = size_ == 1 && alone_is_idle(desc, o);  // nothing for the device to run: not timed
  const size_t slot = recorder_.begin(desc, algo, seq_ + 1, size_, enqueue, /*timeable=*/!idle);
  Result<Work> w = issue(desc, o, ring, slot);
  recorder_.commit(slot, w.ok() ? Status() : w.status(), w.ok() ? 0 : static_cast<int64_t>(now_ns()));
  return w;
}

Result<Work> GpuComm::issue(const OpDesc& desc, const CollectiveOptions& o, bool ring, size_t slot) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (!shared_->failed.ok()) {
      Status s = shared_->failed.with_context(std::string(op_kind_name(desc.kind)) + " on rank " +
                                              std::to_string(rank_) + ": the communicator's GPU path failed earlier");
      // The peers that still issue this operation fail at once naming this rank, instead of at their timeout.
      refuse(s);
      return s;
    }
  }
  DeviceScope scope(device_);
  ZW_TRY(scope.status());
  // Every operation runs after the one before, whatever the stream (the monitor's records rely on it too).
  auto stream = static_cast<cudaStream_t>(o.stream);
  if (last_event_ && last_stream_ != stream)
    ZW_TRY(cuda_status(cudaStreamWaitEvent(stream, *last_event_, 0), "ordering after the previous GPU collective"));
  if (size_ == 1) return issue_alone(desc, o, slot);
  const uint64_t seq = ++seq_;
  const size_t es = dtype_size(desc.dtype);
  const size_t ring_bytes = desc.kind == OpKind::kAllReduce ? (desc.count / size_ + 16) * es : desc.count * es;
  const int ring_blocks =
      std::min({blocks_for(ring_bytes), kMaxRingSlices, std::max(1, shared_->ipc->common_block_limit())});
  Peers peers;
  Status st = exchange(seq, desc, o, ring, ring_blocks, &peers);
  if (!st.ok()) {
    // Failed before its descriptor went out (a buffer CUDA IPC cannot export, a CUDA error): the peers waiting for
    // it learn why at once. A posted descriptor is left alone (a peer may be reading it).
    if (posted_seq_ != seq) shared_->ipc->mailbox().post_refusal(seq, st.message());
    return fail(st);
  }
  if (desc.count == 0) {  // met the peers (a peer that passed another count failed the exchange); nothing to launch
    ZW_TRY(recorder_.mark_start(slot, stream));
    return complete(desc, seq, slot, stream);
  }
  CudaIpcTransport& ipc = *shared_->ipc;
  DirectArgs args;
  args.rank = rank_;
  args.size = size_;
  args.seq = seq;
  args.timeout_ns = static_cast<uint64_t>(timeout_s_ * 1e9);
  args.mine = ipc.signals();
  for (int p = 0; p < size_; ++p) args.peers[p] = ipc.peer(p).signals;
  args.status = ipc.host_status_device();
  if (!ring) ZW_TRY(build(desc, o, peers, &args));
  ZW_TRY(recorder_.mark_start(slot, stream));
  if (ring) {
    RingArgs ra;
    ra.seq = seq;
    ra.timeout_ns = args.timeout_ns;
    build_ring(desc, o, peers, &ra);
    st = launch_ring(desc.dtype, desc.op, ra, ring_blocks, threads_, stream);
  } else if (desc.kind == OpKind::kAllGather && size_ > 1 && desc.count * es >= ce_bytes_) {
    st = enqueue_copy_engine(args, desc.dtype, stream);
  } else {
    st = launch_direct(desc.dtype, desc.op, args, blocks_for(args.count * es), threads_, stream);
  }
  if (!st.ok()) return fail(st);
  return complete(desc, seq, slot, stream);
}

Result<Work> GpuComm::complete(const OpDesc& desc, uint64_t seq, size_t slot, cudaStream_t stream) {
  ZW_TRY(recorder_.mark_end(slot, stream));
  ZW_ASSIGN_OR_RETURN(std::shared_ptr<cudaEvent_t> done, shared_->events->get());
  ZW_TRY(cuda_status(cudaEventRecord(*done, stream), "cudaEventRecord"));
  recorder_.set_done(slot, done);
  last_event_ = done;
  last_stream_ = stream;
  auto poller = std::make_unique<GpuPoller>(shared_, done, seq, desc.kind, rank_, timeout_s_);
  return Work(std::make_shared<WorkState>(std::move(poller)));
}

}  // namespace zw::internal::gpu
