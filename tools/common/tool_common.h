// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Helpers shared by the mcd-* tools (not CLI11: each tool parses in its own main.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/client.h"
#include "memcuda/protocol.h"
#include "memcuda/status.h"

namespace mcd::tools {

// Flags every tool shares; filled by AddCommonFlags (flags.h).
struct CommonFlags {
  std::string redis_url;  // empty: MCD_REDIS_URL, REDIS_URL, the private socket (none: 69)
  int timeout_ms = 5000;
  bool json = false;
  bool quiet = false;
  std::string node;
  std::string prefix = kDefaultPrefix;
  std::string queue = kDefaultQueue;
};

// Prints "<tool>: error: <message>" on stderr and returns the exit code of the table.
int Fail(const char* tool, const Status& status);

// Runs a tool's body, so that no failure leaves it outside the exit-code table: an exception
// that escapes (std::bad_alloc, a library's own) is reported through Fail, as out_of_memory or
// internal, instead of an abort (134).
int Guarded(const char* tool, int (*body)(int, char**), int argc, char** argv);

// "'NAME' is a tensor set of N members: name it 'NAME/'" where a tensor set has `name` as its
// name, else "".
std::string SetHint(Client& client, const std::string& name);
// `status`, a tool's failure on `names`; where it is that no tensor has one of them (not found,
// or not there within a --wait) and a tensor set has it as its name, with SetHint's hint.
Status WithSetHint(Client& client, const std::vector<std::string>& names, Status status);

// Client options from the flags (URL resolution included).
Result<ClientOptions> MakeClientOptions(const CommonFlags& flags, bool require_server);
// Connects; says on stderr (unless `quiet`) when the node was not given and the only live
// server on the Redis was taken (Client::node_discovered), so that it is never a surprise.
Result<std::unique_ptr<Client>> ConnectClient(const char* tool, const ClientOptions& options,
                                              bool quiet);

// The process that what a tool takes (a reference, a stack tensor) is bound to: `owner_pid`
// (--owner-pid) when given, else the tool's parent, the shell or script that ran it. Refused
// (kInvalidArgument) for pid 1, which never exits while the server runs, and so when the parent
// has exited: the tool's parent is then init (or a subreaper), and what the tool bound to it
// would never be given back; and when the parent is outside the tool's PID namespace (docker
// exec: getppid() is 0). `what` names what is bound, `instead` what to do instead.
Result<int64_t> ProcessToBindTo(int64_t owner_pid, const std::string& what,
                                const std::string& instead);

std::string HumanBytes(uint64_t bytes);  // "1.0MiB", "512B": one field for awk and sort -h
// "4096", "64MiB", "40GiB", "1.5G", "2T" -> bytes (K/M/G/T are powers of 1024).
Result<uint64_t> ParseSize(const std::string& text);
std::string HumanAge(int64_t ms);  // "3s", "5m", "2h", "4d"
// The milliseconds of a wait flag's SECONDS (--wait, --wait-free): 0 waits without end (-1).
int TimeoutMs(double seconds);
// "90", "30s", "5m", "2h", "1d" -> ms (a bare number is seconds).
Result<int64_t> ParseDuration(const std::string& text);
// The items of a comma-separated list, empty ones included ("4," -> "4", ""), so that a caller
// refuses a stray comma with the item it cannot read.
std::vector<std::string> SplitList(const std::string& text);
std::string ShapeText(const std::vector<int64_t>& shape);  // "2x3x4"
int64_t NowMs();  // wall clock, ms since the epoch (as ctime)
bool StdoutIsTerminal();
int TerminalWidth();  // columns of stdout's terminal, 0 when not a terminal

// `text` safe to show on a terminal, and reversibly: newline, tab and CR as \n, \t, \r, a
// backslash as \\, the other C0 controls, DEL and every byte that is not part of a well-formed
// UTF-8 sequence (a bare 0x9b, 0xff, overlong forms, surrogates) as \xNN, the C1 controls
// (U+0080 to U+009F) and the bidi controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to
// U+2069) as \uNNNN; other UTF-8 as it is. Every Redis-provided string a tool prints for people
// goes through this (--json output is JSON, escaped by its writer).
std::string Escaped(std::string_view text);

// A plain text table: columns padded to their widest cell; the last column is not padded.
// Every cell is shown Escaped.
// `shrink_column` is truncated (with "~") to fit `max_width` when max_width > 0.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows, int max_width,
                        size_t shrink_column);

// Reads the first `count` elements of `data` (dtype) as text, comma-separated.
std::string FormatValues(const void* data, DType dtype, uint64_t count);

}  // namespace mcd::tools
