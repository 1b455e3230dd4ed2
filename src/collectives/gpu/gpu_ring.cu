// collectives/gpu/gpu_ring.cu — the ring kernels of gpu_kernels.h (launch_ring).
//
// Thread block j handles slice j of every block; all its threads move the slice, then thread 0 publishes the step
// with a system-scope release store in the right neighbour's ring_data[j] (after every thread fenced its stores),
// and waits with acquire loads on its own ring_data[j] / ring_credit[j]. Tags are seq·32 + step + 1, so flags only
// grow across operations and nothing is reset. Kernels start with the arrive barrier of the direct kernel (towards
// the right neighbour, whose output is written) and need no closing barrier: a rank's buffers are written only by
// its left neighbour, with data it waits for.
#include "collectives/gpu/gpu_device.cuh"
#include "collectives/gpu/gpu_kernels.h"

namespace zw::internal::gpu {
namespace {

__device__ __forceinline__ uint64_t tag(uint64_t seq, int step) { return seq * 32 + step + 1; }

// Thread block j's slice [lo, hi) of block b, in elements: whole 16-byte vectors where possible.
__device__ __forceinline__ void slice_of(const RingArgs& a, int b, size_t es, size_t* lo, size_t* hi) {
  const size_t first = a.offsets[b], last = a.offsets[b + 1], unit = 16 / es;
  const size_t units = (last - first + unit - 1) / unit, per = (units + gridDim.x - 1) / gridDim.x;
  *lo = min(last, first + blockIdx.x * per * unit);
  *hi = min(last, *lo + per * unit);
}

struct Ring {
  const RingArgs& a;
  dev::WaitCtx w;
  __device__ bool wait(const uint64_t* flag, uint64_t value, int peer) const {
    __shared__ int failed;
    if (threadIdx.x == 0) failed = dev::wait_at_least(w, flag, value, peer) ? 0 : 1;
    __syncthreads();
    return failed == 0;
  }
  // After every thread's stores of this step: tell `peer`'s flag.
  __device__ void signal(uint64_t* flag, uint64_t value) const {
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) dev::store_release(flag, value);
  }
  __device__ int left() const { return (a.rank + a.size - 1) % a.size; }
  __device__ int right() const { return (a.rank + 1) % a.size; }
};

// base - offset in elements of D: the pointer that makes base-relative slices of block-sized buffers line up with
// element offsets of the n-block layout.
template <DataType D>
__device__ __forceinline__ const void* shift(const void* p, size_t off) {
  return p ? static_cast<const typename dev::DevElem<D>::Storage*>(p) - off : nullptr;
}
template <DataType D>
__device__ __forceinline__ void* shift(void* p, size_t off) {
  return p ? static_cast<typename dev::DevElem<D>::Storage*>(p) - off : nullptr;
}

// One ring step on this block's slice [lo, hi) of a block: d0[i] (and d1[i]) = fold(s0[i], s1[i]) × scale.
template <DataType D, ReduceOp O, bool kVector>
__device__ void step(const void* s0, const void* s1, void* d0, void* d1, size_t lo, size_t hi, double scale) {
  using S = typename dev::DevElem<D>::Storage;
  const void* src[kMaxNodeRanks] = {static_cast<const S*>(s0) + lo, s1 ? static_cast<const S*>(s1) + lo : nullptr};
  void* dst[kMaxNodeRanks] = {static_cast<S*>(d0) + lo, d1 ? static_cast<S*>(d1) + lo : nullptr};
  if (hi > lo)
    dev::move_range<D, O, kVector>(src, s1 ? 2 : 1, dst, d1 ? 2 : 1, hi - lo, scale, threadIdx.x, blockDim.x);
}

// All-gather steps 1..n-2 (forward the block received in the previous step), then wait for the last block.
// Tags start at first_tag_step (0 for all-gather, n-1 for all-reduce's second half).
template <DataType D, ReduceOp O, bool kVector>
__device__ bool forward_blocks(const Ring& r, int first_tag_step) {
  const RingArgs& a = r.a;
  const int n = a.size, j = blockIdx.x;
  size_t lo, hi;
  for (int s = 1; s < n - 1; ++s) {
    const int b = (a.rank - s + n) % n;
    if (!r.wait(&a.mine->ring_data[j], tag(a.seq, first_tag_step + s - 1), r.left())) return false;
    slice_of(a, b, sizeof(typename dev::DevElem<D>::Storage), &lo, &hi);
    step<D, O, kVector>(a.out, nullptr, a.right_out, nullptr, lo, hi, 0);
    r.signal(&a.right->ring_data[j], tag(a.seq, first_tag_step + s));
  }
  return r.wait(&a.mine->ring_data[j], tag(a.seq, first_tag_step + n - 2), r.left());
}

template <DataType D, ReduceOp O, bool kVector>
__device__ void all_gather(const Ring& r) {
  const RingArgs& a = r.a;
  const size_t es = sizeof(typename dev::DevElem<D>::Storage), mine = a.offsets[a.rank];
  size_t lo, hi;
  slice_of(a, a.rank, es, &lo, &hi);
  // Step 0: this rank's block, from its input, to the right neighbour (and into its own output unless in place).
  const bool in_place = a.in == static_cast<const char*>(a.out) + mine * es;
  step<D, O, kVector>(shift<D>(a.in, mine), nullptr, a.right_out, in_place ? nullptr : a.out, lo, hi, 0);
  r.signal(&a.right->ring_data[blockIdx.x], tag(a.seq, 0));
  forward_blocks<D, O, kVector>(r, 0);
}

template <DataType D, ReduceOp O, bool kVector>
__device__ void all_reduce(const Ring& r) {
  const RingArgs& a = r.a;
  const int n = a.size, j = blockIdx.x;
  const size_t es = sizeof(typename dev::DevElem<D>::Storage);
  size_t lo, hi;
  // Reduce-scatter half: the partial sum of block b travels b+1 → b+2 → ... → b through the outputs' block b.
  for (int s = 0; s < n - 1; ++s) {
    const int b = (a.rank - s - 1 + n) % n;
    if (s > 0 && !r.wait(&a.mine->ring_data[j], tag(a.seq, s - 1), r.left())) return;
    slice_of(a, b, es, &lo, &hi);
    step<D, O, kVector>(s == 0 ? a.in : a.out, s == 0 ? nullptr : a.in, a.right_out, nullptr, lo, hi, 0);
    r.signal(&a.right->ring_data[j], tag(a.seq, s));
  }
  // This rank's block is complete once the left neighbour's partial is in: finish it, keep it, pass it on.
  if (!r.wait(&a.mine->ring_data[j], tag(a.seq, n - 2), r.left())) return;
  slice_of(a, a.rank, es, &lo, &hi);
  step<D, O, kVector>(a.out, a.in, a.out, a.right_out, lo, hi, a.scale);
  r.signal(&a.right->ring_data[j], tag(a.seq, n - 1));
  forward_blocks<D, O, kVector>(r, n - 1);
}

template <DataType D, ReduceOp O, bool kVector>
__device__ void reduce_scatter(const Ring& r) {
  const RingArgs& a = r.a;
  const int n = a.size, j = blockIdx.x;
  const size_t es = sizeof(typename dev::DevElem<D>::Storage);
  // Receive slots: step s lands in slot s % 2 of the receiver (0: its output, 1: its scratch); a slot is rewritten
  // two steps later, after the receiver gave credit for it.
  void* my_slot[2] = {a.out, a.scratch};
  void* right_slot[2] = {a.right_out, a.right_scratch};
  size_t lo, hi;
  for (int s = 0; s < n - 1; ++s) {
    const int b = (a.rank - s - 1 + n) % n;
    const size_t off = a.offsets[b];
    if (s > 0 && !r.wait(&a.mine->ring_data[j], tag(a.seq, s - 1), r.left())) return;
    if (s > 1 && !r.wait(&a.mine->ring_credit[j], tag(a.seq, s - 2), r.right())) return;
    slice_of(a, b, es, &lo, &hi);
    step<D, O, kVector>(s == 0 ? a.in : shift<D>(my_slot[(s - 1) % 2], off), s == 0 ? nullptr : a.in,
                        shift<D>(right_slot[s % 2], off), nullptr, lo, hi, 0);
    r.signal(&a.right->ring_data[j], tag(a.seq, s));
    if (s > 0) r.signal(&a.left->ring_credit[j], tag(a.seq, s - 1));  // slot (s-1)%2 consumed
  }
  if (!r.wait(&a.mine->ring_data[j], tag(a.seq, n - 2), r.left())) return;
  const size_t off = a.offsets[a.rank];
  slice_of(a, a.rank, es, &lo, &hi);
  step<D, O, kVector>(shift<D>(my_slot[(n - 2) % 2], off), a.in, shift<D>(a.out, off), nullptr, lo, hi, a.scale);
}

template <DataType D, ReduceOp O, bool kVector>
__global__ void __launch_bounds__(1024) ring_kernel(const RingArgs a) {
  const Ring r{a, dev::WaitCtx{a.status, a.seq, a.timeout_ns}};
  // Arrive: tell the left neighbour (which writes into this rank) that this stream reached the operation, and wait
  // until the right neighbour (which this rank writes into) did.
  if (blockIdx.x == 0 && threadIdx.x == 0) dev::store_release(&a.left->arrive[a.rank], a.seq);
  if (!r.wait(&a.mine->arrive[r.right()], a.seq, r.right())) return;
  switch (a.kind) {
    case RingKind::kAllGather: all_gather<D, O, kVector>(r); break;
    case RingKind::kReduceScatter: reduce_scatter<D, O, kVector>(r); break;
    case RingKind::kAllReduce: all_reduce<D, O, kVector>(r); break;
  }
}

// The kernels launch_ring picks from for (D, O), by whether every range is 16-byte aligned ([1]: the vector kernel) —
// the one table of them, which list_ring_kernels lists too. The choice is each rank's own: ranks whose buffers are
// aligned differently run different kernels of one operation (their slices still match).
using RingKernel = void (*)(RingArgs);
template <DataType D, ReduceOp O>
constexpr RingKernel kRingKernels[2] = {ring_kernel<D, O, false>, ring_kernel<D, O, true>};

}  // namespace

Status launch_ring(DataType dtype, ReduceOp op, const RingArgs& a, int blocks, int threads, cudaStream_t stream) {
  if (blocks < 1 || blocks > kMaxRingSlices)
    return Status(Code::kInternal, "ring kernel with " + std::to_string(blocks) + " blocks (1.." +
                                       std::to_string(kMaxRingSlices) + ")");
  const size_t es = dtype_size(dtype);
  bool vector = true;
  for (const void* p : {a.in, static_cast<const void*>(a.out), static_cast<const void*>(a.scratch),
                        static_cast<const void*>(a.right_out), static_cast<const void*>(a.right_scratch)})
    vector = vector && dev::aligned16(p);
  for (int b = 0; b <= a.size; ++b) vector = vector && (a.offsets[b] * es) % 16 == 0;
  return dev::dispatch(dtype, op, [&]<DataType D, ReduceOp O>() {
    const RingKernel kernel = kRingKernels<D, O>[vector ? 1 : 0];
    kernel<<<blocks, threads, 0, stream>>>(a);
    return dev::launch_status("ring");
  });
}

void list_ring_kernels(std::vector<const void*>* kernels) {
  (void)dev::dispatch_all([&]<DataType D, ReduceOp O>() {
    for (RingKernel k : kRingKernels<D, O>) kernels->push_back(reinterpret_cast<const void*>(k));
    return Status();
  });
}

}  // namespace zw::internal::gpu
