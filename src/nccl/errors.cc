// nccl/errors.cc — NCCL's error reporting on zerowire: ncclGetErrorString, ncclGetLastError, and the mapping of
// zerowire's Status codes onto ncclResult_t.
//
// The last error is kept per thread (ncclGetLastError(NULL), and errors before a communicator exists) and per
// communicator (ncclGetLastError(comm)); each is the full text of zerowire's error, which names the rank, peer and
// host. Failures are also logged (subsystem INIT): usage errors at INFO, the rest at WARN.
#include <cstring>

#include "common/log.h"
#include "nccl/nccl_internal.h"

namespace zw::nccl {
namespace {

thread_local std::string t_last_error;

}  // namespace

ncclResult_t fail(ncclComm* comm, ncclResult_t code, const std::string& text) {
  t_last_error = text;
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->mu);
    comm->last_error = text;
  }
  if (code == ncclInvalidArgument || code == ncclInvalidUsage)  // the caller hears of it; NCCL_DEBUG=WARN-style noise
    ZW_INFO(kInit, "nccl: %s (%s)", text.c_str(), ncclGetErrorString(code));  // only at ZW_DEBUG=INFO
  else
    ZW_WARN(kInit, "nccl: %s (%s)", text.c_str(), ncclGetErrorString(code));
  return code;
}

ncclResult_t result_of(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return ncclSuccess;
    case Code::kInvalidArgument: return ncclInvalidArgument;
    case Code::kUnsupported:
    case Code::kNotFound: return ncclInvalidUsage;
    case Code::kConnectionFailed:
    case Code::kConnectionLost:
    case Code::kAuthFailed:
    case Code::kProtocolError:
    case Code::kRemoteAccess:
    case Code::kEndpointError:
    case Code::kPeerFailed:
    case Code::kAborted:
    case Code::kDesync:
    case Code::kTimeout: return ncclRemoteError;
    case Code::kSystem:
    case Code::kOutOfMemory: return ncclSystemError;
    case Code::kInternal: return ncclInternalError;
  }
  return ncclInternalError;
}

ncclResult_t fail(ncclComm* comm, const Status& status, const std::string& what) {
  return fail(comm, result_of(status), what + ": " + status.message());
}

ncclResult_t cuda_fail(ncclComm* comm, cudaError_t err, const std::string& what) {
  cudaGetLastError();  // clears the sticky state of a non-sticky error
  return fail(comm, ncclUnhandledCudaError,
              what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace zw::nccl

using namespace zw::nccl;  // NOLINT(google-build-using-namespace): the C API below is this file's only other content

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "success";
    case ncclUnhandledCudaError: return "a CUDA call failed (ncclGetLastError names it)";
    case ncclSystemError: return "a system call or allocation failed (ncclGetLastError says which)";
    case ncclInternalError: return "internal error in zerowire (please report it with ncclGetLastError's text)";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError says which)";
    case ncclInvalidUsage: return "invalid usage or unsupported call (ncclGetLastError says why)";
    case ncclRemoteError: return "a peer failed, exited or could not be reached (ncclGetLastError names it)";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm == nullptr) return t_last_error.c_str();
  // The text lives in the communicator; a copy per thread keeps it stable while another thread records a new one.
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(comm->mu);
  copy = comm->last_error.empty() ? t_last_error : comm->last_error;
  return copy.c_str();
}

}  // extern "C"
