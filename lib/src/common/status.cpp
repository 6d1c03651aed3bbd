// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/status.h"

#include <array>
#include <cstring>

namespace mcd {
namespace {

struct CodeInfo {
  ErrorCode code;
  const char* name;
  int exit_code;
};

// The single table: name and exit code of every code. Keep in code order.
constexpr std::array<CodeInfo, 23> kCodes = {{
    {ErrorCode::kOk, "ok", 0},
    {ErrorCode::kInvalidArgument, "invalid_argument", 64},
    {ErrorCode::kNotFound, "not_found", 1},
    {ErrorCode::kAlreadyExists, "already_exists", 1},
    {ErrorCode::kNotReady, "not_ready", 75},
    {ErrorCode::kOutOfMemory, "out_of_memory", 69},
    {ErrorCode::kUnavailable, "unavailable", 69},
    {ErrorCode::kNoDevice, "no_device", 69},
    {ErrorCode::kTimeout, "timeout", 75},
    {ErrorCode::kRedisError, "redis_error", 76},
    {ErrorCode::kUnexpectedReply, "unexpected_reply", 76},
    {ErrorCode::kAuthFailed, "auth_failed", 69},
    {ErrorCode::kIoError, "io_error", 74},
    {ErrorCode::kCudaError, "cuda_error", 70},
    {ErrorCode::kStopped, "stopped", 69},
    {ErrorCode::kWouldDeadlock, "would_deadlock", 70},
    {ErrorCode::kInternal, "internal", 70},
    {ErrorCode::kPermissionDenied, "permission_denied", 69},
    {ErrorCode::kWrongNode, "wrong_node", 64},
    {ErrorCode::kTooLarge, "too_large", 64},
    {ErrorCode::kUnsupported, "unsupported", 69},
    {ErrorCode::kTryAgain, "try_again", 75},
    {ErrorCode::kNotHeld, "not_held", 1},
}};

const CodeInfo* Find(int32_t value) noexcept {
  if (value < 0 || static_cast<size_t>(value) >= kCodes.size()) return nullptr;
  return &kCodes[static_cast<size_t>(value)];
}

}  // namespace

const char* ErrorName(int32_t code) noexcept {
  const CodeInfo* info = Find(code);
  return info ? info->name : "unknown";
}

const char* ErrorName(ErrorCode code) noexcept { return ErrorName(static_cast<int32_t>(code)); }

std::optional<ErrorCode> ErrorCodeFromName(const std::string& name) noexcept {
  for (const CodeInfo& info : kCodes) {
    if (name == info.name) return info.code;
  }
  return std::nullopt;
}

int ExitCodeFor(ErrorCode code) noexcept {
  const CodeInfo* info = Find(static_cast<int32_t>(code));
  return info ? info->exit_code : 70;
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(ErrorName(code_)) + ": " + message_;
}

}  // namespace mcd
