// tensor/cuda/cuda_check.h — turning CUDA and cuBLASLt errors into Status, for the tensor layer's CUDA files.
//
// ZW_CUDA_TRY(call) returns kSystem with the call's text, the error's name and description from the enclosing
// function (which returns Status or Result<T>); ZW_CUDA_LAUNCH_TRY(what) checks the last launch.
// Non-goals: aborting, logging (the caller decides what a failure means).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "zerowire/status.h"

namespace zw::tensor::cuda {

inline Status cuda_status(const char* what, cudaError_t err) {
  return Status(Code::kSystem, std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace zw::tensor::cuda

#define ZW_CUDA_TRY(call)                                                                 \
  do {                                                                                    \
    const cudaError_t zw_cuda_err_ = (call);                                              \
    if (zw_cuda_err_ != cudaSuccess) return ::zw::tensor::cuda::cuda_status(#call, zw_cuda_err_); \
  } while (0)

#define ZW_CUDA_LAUNCH_TRY(what)                                                           \
  do {                                                                                     \
    const cudaError_t zw_cuda_err_ = cudaGetLastError();                                   \
    if (zw_cuda_err_ != cudaSuccess) return ::zw::tensor::cuda::cuda_status(what, zw_cuda_err_); \
  } while (0)
