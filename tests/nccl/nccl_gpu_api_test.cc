// libzwnccl on CUDA device memory (skips without a GPU): ranks as threads sharing GPU 0, each on a non-blocking stream
// of its own, calling NCCL's C API as nccl-tests and PyTorch do. Every input is written on the rank's stream just
// before the call (stream order is all that makes it visible) and every output is read back on that stream after it:
// all-reduce, all-gather and reduce-scatter (zerowire's node-local IPC engine), all-to-all out of place and in place,
// and a group of sends and receives (a ring plus a send to oneself), then ncclCommGetAsyncError. Worlds 1-3.
// Non-goals: speed, several GPUs (nccl-tests' -g N on the GPU machine).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <vector>

#include "nccl.h"
#include "nccl/nccl_test_util.h"

namespace zw::nccl_test {
namespace {

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

float val(int rank, size_t i) { return static_cast<float>(rank * 1000 + static_cast<int>(i % 97)); }

// One rank's buffers and stream.
struct Rank {
  cudaStream_t stream = nullptr;
  float* in = nullptr;
  float* out = nullptr;
  size_t elems = 0;
  std::vector<float> host;

  explicit Rank(size_t n) : elems(n), host(n) {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&in, n * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&out, n * sizeof(float)), cudaSuccess);
  }
  ~Rank() {
    cudaStreamSynchronize(stream);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
  }
  // Writes `values` into `dst` and poisons `poison` (may be null), on the stream.
  void put(float* dst, const std::vector<float>& values, float* poison) {
    std::memcpy(host.data(), values.data(), values.size() * sizeof(float));
    EXPECT_EQ(cudaMemcpyAsync(dst, host.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    if (poison != nullptr) {
      EXPECT_EQ(cudaMemsetAsync(poison, 0xA5, elems * sizeof(float), stream), cudaSuccess);
    }
  }
  std::vector<float> get(const float* src) {
    std::vector<float> h(elems);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), src, elems * sizeof(float), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return h;
  }
};

// The first element of got[at, at + count) that differs from want(i), as a failure. EXPECT, not ASSERT: every rank
// must still reach the barrier at the end.
template <class F>
void expect_range(const char* what, int r, const std::vector<float>& got, size_t at, size_t count, F want) {
  for (size_t i = 0; i < count; ++i)
    if (got[at + i] != want(i)) {
      ADD_FAILURE() << what << ", rank " << r << ", element " << at + i << ": got " << got[at + i] << ", want "
                    << want(i);
      return;
    }
}

class NcclDevice : public ::testing::TestWithParam<int> {};

TEST_P(NcclDevice, CollectivesAllToAllAndSendRecv) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: libzwnccl's device-memory path needs one";
  const int n = GetParam();
  const size_t count = 4099;  // odd: not a whole number of 16-byte vectors
  const size_t elems = count * static_cast<size_t>(n < 2 ? 2 : n);
  std::barrier sync(n);
  run_ranks(n, [&](int r, ncclComm_t comm) {
    Rank k(elems);
    std::vector<float> mine(elems);
    for (size_t i = 0; i < elems; ++i) mine[i] = val(r, i);

    k.put(k.in, mine, k.out);
    EXPECT_NCCL_OK(ncclAllReduce(k.in, k.out, count, ncclFloat, ncclSum, comm, k.stream));
    std::vector<float> got = k.get(k.out);
    expect_range("all_reduce", r, got, 0, count, [&](size_t i) {
      float want = 0;
      for (int p = 0; p < n; ++p) want += val(p, i);
      return want;
    });

    k.put(k.in, mine, k.out);
    EXPECT_NCCL_OK(ncclAllGather(k.in, k.out, count, ncclFloat, comm, k.stream));
    got = k.get(k.out);
    for (int p = 0; p < n; ++p)
      expect_range("all_gather", r, got, p * count, count, [&](size_t i) { return val(p, i); });

    k.put(k.in, mine, k.out);
    EXPECT_NCCL_OK(ncclReduceScatter(k.in, k.out, count, ncclFloat, ncclSum, comm, k.stream));
    got = k.get(k.out);
    expect_range("reduce_scatter", r, got, 0, count, [&](size_t i) {
      float want = 0;
      for (int p = 0; p < n; ++p) want += val(p, r * count + i);
      return want;
    });

    for (bool in_place : {false, true}) {  // block p of rank q's input lands in block q of rank p's output
      float* src = in_place ? k.out : k.in;
      k.put(src, mine, in_place ? nullptr : k.out);
      EXPECT_NCCL_OK(ncclAlltoAll(src, k.out, count, ncclFloat, comm, k.stream));
      got = k.get(k.out);
      for (int p = 0; p < n; ++p)
        expect_range(in_place ? "alltoall in place" : "alltoall", r, got, p * count, count,
                     [&](size_t i) { return val(p, r * count + i); });
    }

    // A ring (receive from the left, send to the right) and a send to oneself, in one group, any order.
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    k.put(k.in, mine, k.out);
    EXPECT_NCCL_OK(ncclGroupStart());
    EXPECT_NCCL_OK(ncclRecv(k.out, count, ncclFloat, left, comm, k.stream));
    EXPECT_NCCL_OK(ncclSend(k.in + count, count, ncclFloat, r, comm, k.stream));
    EXPECT_NCCL_OK(ncclSend(k.in, count, ncclFloat, right, comm, k.stream));
    EXPECT_NCCL_OK(ncclRecv(k.out + count, count, ncclFloat, r, comm, k.stream));
    EXPECT_NCCL_OK(ncclGroupEnd());
    got = k.get(k.out);
    // With one rank, left == right == r: the two receives from r match the two sends to r in issue order.
    expect_range("recv from the left", r, got, 0, count,
                 [&](size_t i) { return n == 1 ? val(r, count + i) : val(left, i); });
    expect_range("recv from oneself", r, got, count, count,
                 [&](size_t i) { return n == 1 ? val(r, i) : val(r, count + i); });

    ncclResult_t async = ncclInternalError;
    EXPECT_NCCL_OK(ncclCommGetAsyncError(comm, &async));
    EXPECT_EQ(async, ncclSuccess) << ncclGetLastError(comm);
    sync.arrive_and_wait();  // no rank frees memory (cudaFree waits for the device) while a peer's kernel may run
  });
}

INSTANTIATE_TEST_SUITE_P(World, NcclDevice, ::testing::Values(1, 2, 3));

}  // namespace
}  // namespace zw::nccl_test
