// zerowire/status.h — the one error type of the library: Status and Result<T>.
//
// Codes are grouped by scope (usage, link, endpoint, communicator, system) as UCX groups its status codes, so
// a caller can branch on the scope (is_link_error) without listing codes. A Status carries a human message
// that says what was wrong, with which rank/peer/host, and what to do; ZW_TRY appends a file:line breadcrumb
// at each level it passes through, as NCCL's NCCLCHECK does. Non-goals: exceptions, errno-style globals.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace zw {

enum class Code : uint16_t {
  kOk = 0,
  // usage: the caller asked for something invalid; nothing was communicated.
  kInvalidArgument = 100,
  kUnsupported = 101,
  kNotFound = 102,
  // link: establishing or keeping a connection (store, peer) failed.
  kConnectionFailed = 200,
  kConnectionLost = 201,
  kTimeout = 202,
  kAuthFailed = 203,
  kProtocolError = 204,
  // endpoint: a data-path operation on an established connection failed.
  kRemoteAccess = 300,
  kEndpointError = 301,
  // communicator: ranks disagree or the communicator was torn down.
  kDesync = 400,
  kPeerFailed = 401,
  kAborted = 402,
  // system: the OS or the library itself.
  kSystem = 500,
  kOutOfMemory = 501,
  kInternal = 502,
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(Code code, std::string message);

  static Status ok_status() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  // The message without breadcrumbs.
  const std::string& message() const;
  // "CODE: message [at file:line <- file:line]".
  std::string to_string() const;

  bool is_usage_error() const { return scope() == 1; }
  bool is_link_error() const { return scope() == 2; }
  bool is_endpoint_error() const { return scope() == 3; }
  bool is_communicator_error() const { return scope() == 4; }

  // Returns a copy with "file:line" appended to the breadcrumb trail (used by ZW_TRY).
  Status at(const char* file, int line) const;
  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const;

 private:
  struct State {
    Code code;
    std::string message;
    std::string breadcrumbs;
  };
  int scope() const { return static_cast<int>(code()) / 100; }
  std::shared_ptr<const State> state_;  // null when ok; immutable once built, so copies are cheap
};

// errno-style helper: "what: strerror(err)".
Status system_error(const std::string& what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Status(Code::kInternal, "Result constructed from an ok Status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

namespace internal {
inline const Status& as_status(const Status& s) { return s; }
template <typename T>
const Status& as_status(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

}  // namespace zw

#define ZW_CONCAT_INNER(a, b) a##b
#define ZW_CONCAT(a, b) ZW_CONCAT_INNER(a, b)

// Returns early with a breadcrumb when `expr` (a Status or Result) failed.
#define ZW_TRY(expr)                                                      \
  do {                                                                    \
    const auto& zw_try_value_ = (expr);                                   \
    if (!::zw::internal::as_status(zw_try_value_).ok())                   \
      return ::zw::internal::as_status(zw_try_value_).at(__FILE__, __LINE__); \
  } while (0)

// `ZW_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error with a breadcrumb.
#define ZW_ASSIGN_OR_RETURN(lhs, expr) ZW_ASSIGN_OR_RETURN_IMPL(ZW_CONCAT(zw_result_, __LINE__), lhs, expr)
#define ZW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)       \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status().at(__FILE__, __LINE__); \
  lhs = std::move(tmp).value()
