// bench_loop.h — zerowire._C._bench_loop: the benchmark's measure of zerowire without the binding (bench/torch only).
//
// Runs one collective `iters` times straight on the communicator of a zerowire process group's backend, on the
// memory of the tensors it is given (the same tensors the torch calls use), from C++ with the GIL released: no
// Python, no c10d dispatch, no Work or Future. bench_collectives.py times it interleaved with the torch calls, so the
// difference is the binding's own cost on the same buffers and communicator. Every rank of the group must call it.
// Non-goals: a public API (the leading underscore), CUDA tensors, checking arguments beyond what zerowire checks.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>

namespace zwt {

// Seconds for `iters` blocking calls of `op` ("all_gather_into_tensor": output gathers input; "reduce_scatter_tensor":
// output gets its block of input's float sum; "all_reduce": output summed in place) on the backend's communicator.
// `through_backend`: the calls go through the backend's own methods (_allgather_base, ...) and Work::wait from C++
// instead, which leaves out only Python and torch's dispatcher.
// Raises ValueError when `backend` is not a zerowire backend or a tensor is not a contiguous float32 CPU tensor.
double bench_loop(const c10::intrusive_ptr<c10d::Backend>& backend, const std::string& op, const at::Tensor& output,
                  const at::Tensor& input, int64_t iters, bool through_backend = false);

}  // namespace zwt
