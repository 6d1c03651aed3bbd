// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "tool_common.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>

namespace mcd::tools {

namespace {
// The parent as the tool started: a parent that differs later is the one that ran the tool
// gone, and the tool adopted.
const pid_t parent_at_start = getppid();
}  // namespace

int Fail(const char* tool, const Status& status) {
  // Messages quote what Redis holds (a state, a node, a key name).
  std::cerr << tool << ": error: " << Escaped(status.message()) << " (" << ErrorName(status.code())
            << ")\n";
  return ExitCodeFor(status.code());
}

std::string SetHint(Client& client, const std::string& name) {
  if (name.empty() || name.back() == '/') return "";
  auto members = client.SetMembers(name);
  if (!members.ok() || members->empty()) return "";
  return "'" + name + "' is a tensor set of " + std::to_string(members->size()) +
         " members: name it '" + name + "/'";
}

Status WithSetHint(Client& client, const std::vector<std::string>& names, Status status) {
  // Not found, or not there within a --wait.
  if (status.code() != ErrorCode::kNotFound && status.code() != ErrorCode::kTimeout) return status;
  for (const std::string& name : names) {
    if (status.message().find("'" + name + "'") == std::string::npos) continue;
    std::string hint = SetHint(client, name);
    if (!hint.empty()) return Status(status.code(), status.message() + "; " + hint);
  }
  return status;
}

// A tool's data goes to standard output: output that could not all be written (a full disk, a
// closed file) is a failure, not a success with a short file. A reader that stopped reading
// (EPIPE: `| head`) took what it wanted.
static int StdoutFailed(const char* tool, int flush_errno) {
  errno = 0;
  bool flushed = std::fflush(stdout) == 0;
  int err = errno != 0 ? errno : flush_errno;
  if (flushed && !std::ferror(stdout)) return 0;
  if (err == EPIPE) return 0;
  return Fail(tool,
              Status(ErrorCode::kIoError, std::string("writing standard output: ") +
                                              (err != 0 ? std::strerror(err) : "write error")));
}

int Guarded(const char* tool, int (*body)(int, char**), int argc, char** argv) {
  try {
    int rc = body(argc, argv);
    errno = 0;
    std::cout.flush();
    int failed = StdoutFailed(tool, errno);
    return rc == 0 ? failed : rc;
  } catch (const std::bad_alloc&) {
    return Fail(tool, Status(ErrorCode::kOutOfMemory, "out of host memory"));
  } catch (const std::exception& e) {
    return Fail(tool, Status(ErrorCode::kInternal, std::string("unexpected failure: ") + e.what()));
  }
}

Result<std::unique_ptr<Client>> ConnectClient(const char* tool, const ClientOptions& options,
                                              bool quiet) {
  MCD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Connect(options));
  if (client->node_discovered() && !quiet) {
    std::cerr << tool << ": note: no server for this host's node; using node '"
              << Escaped(client->options().node) << "', the only one live on "
              << client->options().redis_url.Redacted() << " (--node or MCD_NODE to be explicit)\n";
  }
  return client;
}

Result<ClientOptions> MakeClientOptions(const CommonFlags& flags, bool require_server) {
  ClientOptions options;
  MCD_ASSIGN_OR_RETURN(options.redis_url, ResolveRedisUrl(flags.redis_url));
  options.keys.prefix = flags.prefix;
  options.keys.queue = flags.queue;
  options.node = flags.node;
  options.timeout_ms = flags.timeout_ms;
  options.require_server = require_server;
  return options;
}

Result<int64_t> ProcessToBindTo(int64_t owner_pid, const std::string& what,
                                const std::string& instead) {
  if (owner_pid == 1) {
    return Status(ErrorCode::kInvalidArgument, "--owner-pid 1 is init, which never exits: " + what +
                                                   " would never be given back; " + instead);
  }
  if (owner_pid != 0) return owner_pid;
  pid_t parent = getppid();
  if (parent > 1 && parent == parent_at_start) return static_cast<int64_t>(parent);
  if (parent == 0) {
    // A parent outside this process's PID namespace names no process here, nor to the server.
    return Status(ErrorCode::kInvalidArgument,
                  "this tool was run from outside its PID namespace (docker exec, kubectl exec, "
                  "nsenter: its parent is pid 0 here), so there is no process to bind " +
                      what + " to that the server could watch; " + instead);
  }
  return Status(ErrorCode::kInvalidArgument,
                "the shell or script that ran this tool has exited, or is init (the tool's "
                "parent is pid " +
                    std::to_string(parent) + "): " + what +
                    " would be bound to a process that never exits; " + instead);
}

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + "B";
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), value < 10 ? "%.1f%s" : "%.0f%s", value, kUnits[unit]);
  return buf;
}

Result<uint64_t> ParseSize(const std::string& text) {
  // Decimal digits with at most one point, then the unit: no sign, no exponent, no hex (which
  // strtod alone would take).
  size_t digits = 0;
  bool point = false;
  for (; digits < text.size(); ++digits) {
    char c = text[digits];
    if (c == '.' && !point) {
      point = true;
    } else if (c < '0' || c > '9') {
      break;
    }
  }
  if (digits == 0 || (point && digits == 1)) {
    return Status(ErrorCode::kInvalidArgument, "bad size '" + text + "' (e.g. 64MiB, 40GiB)");
  }
  double value = std::strtod(text.substr(0, digits).c_str(), nullptr);
  std::string unit = text.substr(digits);
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    return Status(ErrorCode::kInvalidArgument,
                  "bad size unit in '" + text + "' (B, KiB, MiB, GiB or TiB)");
  // 2^64 and above would wrap.
  if (value * scale >= 18446744073709551616.0) {
    return Status(ErrorCode::kInvalidArgument, "size '" + text + "' is too large");
  }
  return static_cast<uint64_t>(value * scale);
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  for (size_t start = 0;;) {
    size_t comma = text.find(',', start);
    items.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::string HumanAge(int64_t ms) {
  if (ms < 0) ms = 0;
  int64_t s = ms / 1000;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

int TimeoutMs(double seconds) {
  if (seconds <= 0) return -1;
  return static_cast<int>(std::min(seconds * 1000.0, 2e9));
}

Result<int64_t> ParseDuration(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  std::string unit = end != nullptr ? end : "";
  double scale = unit.empty() || unit == "s" ? 1000
                 : unit == "m"               ? 60e3
                 : unit == "h"               ? 3600e3
                 : unit == "d"               ? 86400e3
                                             : 0;
  if (text.empty() || end == text.c_str() || scale == 0 || !(value >= 0) || value > 1e9) {
    return Status(ErrorCode::kInvalidArgument,
                  "'" + text + "' is not a duration (like 90, 30s, 5m, 2h or 1d)");
  }
  return static_cast<int64_t>(value * scale);
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "x" : "") + std::to_string(shape[i]);
  return out;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool StdoutIsTerminal() { return isatty(STDOUT_FILENO) == 1; }

int TerminalWidth() {
  if (!StdoutIsTerminal()) return 0;
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return 80;
  return ws.ws_col;
}

namespace {

// The code point of the well-formed UTF-8 sequence at text[i] (its length in `length`), or -1
// when the bytes there are not one: a stray continuation byte, a lead byte without its
// continuations, an overlong form (C0 9B for U+001B), a surrogate or a code point past U+10FFFF.
int32_t DecodeUtf8(std::string_view text, size_t i, size_t& length) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  // C0 and C1 would only start overlong forms, F5 to FF code points past U+10FFFF.
  if (lead < 0xc2 || lead > 0xf4) return -1;
  length = lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
  const int32_t min = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
  if (text.size() - i < length) return -1;
  int32_t cp = lead & (0x3f >> (length - 1));
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  return cp;
}

// C1 controls (8-bit CSI, OSC, ...) and the Unicode Bidi_Control characters, which reorder how
// the rest of a line is shown.
bool IsHiddenCodePoint(int32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string Escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char buf[16];
  for (size_t i = 0; i < text.size();) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '\n':
          out += "\\n";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\\':
          out += "\\\\";
          break;
        default:
          if (c >= 0x20 && c != 0x7f) {
            out.push_back(static_cast<char>(c));
          } else {
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
          }
      }
      continue;
    }
    size_t length = 1;
    int32_t cp = DecodeUtf8(text, i, length);
    if (cp < 0) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);  // one byte, then decode again after it
      out += buf;
      ++i;
    } else if (IsHiddenCodePoint(cp)) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
      i += length;
    } else {
      out.append(text, i, length);
      i += length;
    }
  }
  return out;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& raw_rows, int max_width,
                        size_t shrink_column) {
  if (raw_rows.empty()) return "";
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& raw : raw_rows) {
    rows.emplace_back();
    for (const std::string& cell : raw) rows.back().push_back(Escaped(cell));
  }
  size_t columns = rows[0].size();
  std::vector<size_t> widths(columns, 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < columns && c < row.size(); ++c)
      widths[c] = std::max(widths[c], row[c].size());
  }
  if (max_width > 0 && shrink_column < columns) {
    size_t total = 0;
    for (size_t w : widths) total += w + 2;
    if (total > static_cast<size_t>(max_width)) {
      size_t excess = total - static_cast<size_t>(max_width);
      widths[shrink_column] =
          std::max<size_t>(8, widths[shrink_column] > excess ? widths[shrink_column] - excess : 8);
    }
  }
  size_t line_width = columns;
  for (size_t w : widths) line_width += w + 2;
  std::string out;
  out.reserve(rows.size() * line_width);
  for (const auto& row : rows) {
    size_t start = out.size();
    for (size_t c = 0; c < columns && c < row.size(); ++c) {
      const std::string& cell = row[c];
      size_t shown = cell.size();
      if (shown > widths[c]) {
        shown = widths[c];
        out.append(cell, 0, shown - 1);
        out += '~';
      } else {
        out += cell;
      }
      if (c + 1 < columns) out.append(widths[c] - shown + 2, ' ');
    }
    while (out.size() > start && out.back() == ' ') out.pop_back();
    out += '\n';
  }
  return out;
}

namespace {
float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

template <typename T>
T Load(const void* data, uint64_t i) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + i * sizeof(T), sizeof(T));
  return value;
}
}  // namespace

std::string FormatValues(const void* data, DType dtype, uint64_t count) {
  std::string out;
  char buf[64];
  for (uint64_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::kF16:
        std::snprintf(buf, sizeof(buf), "%g",
                      static_cast<double>(HalfToFloat(Load<uint16_t>(data, i))));
        break;
      case DType::kBF16: {
        uint32_t bits = static_cast<uint32_t>(Load<uint16_t>(data, i)) << 16;
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(f));
        break;
      }
      case DType::kF32:
        std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(Load<float>(data, i)));
        break;
      case DType::kF64:
        std::snprintf(buf, sizeof(buf), "%g", Load<double>(data, i));
        break;
      case DType::kI8:
        std::snprintf(buf, sizeof(buf), "%d", Load<int8_t>(data, i));
        break;
      case DType::kI16:
        std::snprintf(buf, sizeof(buf), "%d", Load<int16_t>(data, i));
        break;
      case DType::kI32:
        std::snprintf(buf, sizeof(buf), "%d", Load<int32_t>(data, i));
        break;
      case DType::kI64:
        std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(Load<int64_t>(data, i)));
        break;
      case DType::kU8:
        std::snprintf(buf, sizeof(buf), "%u", Load<uint8_t>(data, i));
        break;
      case DType::kU16:
        std::snprintf(buf, sizeof(buf), "%u", Load<uint16_t>(data, i));
        break;
      case DType::kU32:
        std::snprintf(buf, sizeof(buf), "%u", Load<uint32_t>(data, i));
        break;
      case DType::kU64:
        std::snprintf(buf, sizeof(buf), "%llu",
                      static_cast<unsigned long long>(Load<uint64_t>(data, i)));
        break;
      case DType::kBool:
        std::snprintf(buf, sizeof(buf), "%s", Load<uint8_t>(data, i) ? "true" : "false");
        break;
    }
    if (i != 0) out += ",";
    out += buf;
  }
  return out;
}

}  // namespace mcd::tools
