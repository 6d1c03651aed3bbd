// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Error model shared by the library, its C ABI and the tools.
//
// Every failure is an ErrorCode (stable int32_t values with stable snake_case names, like
// cudaGetErrorName) plus a one-line detail message that names the failing call and its CUDA or
// Redis error. No exception crosses the library boundary or a worker thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "memcuda/export.h"

namespace mcd {

// Values are part of the C ABI (memcuda.h mirrors them): append, never renumber.
enum class ErrorCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,    // malformed input: bad JSON, bad name, bad dtype/shape, bad flag
  kNotFound = 2,           // no tensor of that name
  kAlreadyExists = 3,      // create of a name that exists
  kNotReady = 4,           // tensor is being created or deleted
  kOutOfMemory = 5,        // device, pool or host memory exhausted
  kUnavailable = 6,        // Redis, the server or the GPU cannot be reached
  kNoDevice = 7,           // no such device / no CUDA device on this machine
  kTimeout = 8,            // an operation did not finish in time: try again
  kRedisError = 9,         // Redis answered with an error reply
  kUnexpectedReply = 10,   // Redis answered with a reply of the wrong type
  kAuthFailed = 11,        // AUTH rejected
  kIoError = 12,           // file or socket I/O failed
  kCudaError = 13,         // a CUDA call failed (detail names it)
  kStopped = 14,           // the worker was stopped before the job was accepted
  kWouldDeadlock = 15,     // a worker job waited on its own worker
  kInternal = 16,          // a bug: an unexpected exception or state
  kPermissionDenied = 17,  // peer credentials or file permissions refused
  kWrongNode = 18,         // the command names another node
  kTooLarge = 19,          // payload, shape or size over a limit
  kUnsupported = 20,       // feature not available on this build/host
  kTryAgain = 21,          // Redis is loading, busy, failing over or restarting: try again soon
  kNotHeld = 22,           // a release by a process that holds none of the tensor's references
};

// Stable snake_case name of a code ("not_found"); "unknown" for values outside the enum.
MCD_API const char* ErrorName(ErrorCode code) noexcept;
MCD_API const char* ErrorName(int32_t code) noexcept;
// Parses a snake_case name back into a code; nullopt when unknown.
MCD_API std::optional<ErrorCode> ErrorCodeFromName(const std::string& name) noexcept;

// The one table from error codes to the tools' exit codes (sysexits-style):
// 0 ok, 1 negative answer, 64 usage, 69 unavailable, 70 internal, 74 I/O, 75 timeout,
// 76 unexpected Redis reply.
MCD_API int ExitCodeFor(ErrorCode code) noexcept;

// A code and its detail message. Cheap to copy when ok. [[nodiscard]]: a Status nobody reads is
// an error nobody handles; discard one on purpose with a (void) cast and a comment saying why.
class [[nodiscard]] MCD_API Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const noexcept { return code_ == ErrorCode::kOk; }
  ErrorCode code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }
  // "not_found: tensor 'x' does not exist"
  std::string ToString() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  Result(ErrorCode code, std::string message) : status_(code, std::move(message)) {}

  bool ok() const noexcept { return value_.has_value(); }
  const Status& status() const noexcept { return status_; }
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

}  // namespace mcd

#define MCD_CONCAT_INNER(a, b) a##b
#define MCD_CONCAT(a, b) MCD_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not ok.
#define MCD_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::mcd::Status mcd_status_ = (expr);        \
    if (!mcd_status_.ok()) return mcd_status_; \
  } while (false)

// `MCD_ASSIGN_OR_RETURN(auto x, ResultExpr());` binds the value or returns the Status.
#define MCD_ASSIGN_OR_RETURN(lhs, expr) \
  MCD_ASSIGN_OR_RETURN_IMPL(MCD_CONCAT(mcd_result_, __LINE__), lhs, expr)
#define MCD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
