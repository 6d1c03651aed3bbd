// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// CLI11 helpers shared by the tools. Included by each tool's main.cpp only: CLI11 2.1.2 is
// header-only and is compiled once per tool.
#pragma once

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstring>

#include "memcuda/memcuda.h"
#include "tool_common.h"

namespace mcd::tools {

inline constexpr const char* kEnvironmentFooter =
    "Environment:\n"
    "  MCD_REDIS_URL       Redis URL when --redis-url is not given (then REDIS_URL); without\n"
    "                      either, the private Redis of `mcd-serve --spawn-redis` when it\n"
    "                      runs, else exit 69 (redis:// names redis://127.0.0.1:6379)\n"
    "  MCD_REDIS_PASSWORD  password when the URL has none (then MCD_REDIS_PASSWORD_FILE, a\n"
    "                      file holding it, then REDISCLI_AUTH); never printed\n"
    "  MCD_NODE            the node when --node is not given\n"
    "  MCD_TRUSTED_USERS   users besides this one and root whose server this tool may use\n"
    "Exit codes: 0 ok, 1 not found / already exists / not held, 64 usage, 69 unavailable\n"
    "  (Redis none named or not there, server, GPU or memory), 70 internal, 74 I/O, 75 timeout,\n"
    "  not ready, or Redis loading or failing over (try again), 76 unexpected Redis reply.";

inline void AddConnectionFlags(CLI::App& app, CommonFlags& flags) {
  app.add_option("--redis-url", flags.redis_url,
                 "redis://[user:password@]host:port/db or unix:///path.sock");
  app.add_option("--node", flags.node,
                 "Node whose mcd-serve to use (default: MCD_NODE, else the host name, else the "
                 "only live server)");
  app.add_option("--prefix", flags.prefix, "Redis key prefix")->capture_default_str();
  app.add_option("--queue", flags.queue, "Command list")->capture_default_str();
}

inline void AddCommonFlags(CLI::App& app, CommonFlags& flags) {
  AddConnectionFlags(app, flags);
  app.add_option(
         "--timeout-ms", flags.timeout_ms,
         "Wait at most this long for the server's reply (a command still queued then is withdrawn)")
      ->check(CLI::Range(1, 3600000))
      ->capture_default_str();
  // -q and --json exclude each other in every tool: one asks for nothing on stdout, the other
  // for a record there.
  auto* json = app.add_flag("--json", flags.json, "Print JSON (stable keys) instead of text");
  app.add_flag("-q,--quiet", flags.quiet, "Print nothing on success")->excludes(json);
}

// --owner-pid and --detached of the tools that take (mcd-get) or give back (mcd-rm) references:
// they exit at once, so a reference is bound to the shell or script that ran them by default.
struct HolderFlags {
  int64_t owner_pid = 0;
  bool detached = false;
};

inline void AddHolderFlags(CLI::App& app, HolderFlags& flags, const char* verb,
                           const char* detached_help) {
  app.add_option("--owner-pid", flags.owner_pid,
                 std::string("The process whose reference to ") + verb +
                     " (default: this tool's parent, the shell or script that runs it; refused "
                     "when that is pid 1); the server gives back a dead process's references")
      ->check(CLI::PositiveNumber);
  app.add_flag("--detached", flags.detached, detached_help)->excludes("--owner-pid");
}

// ClientOptions::holder_pid for the flags (ProcessToBindTo's refusals); `verb` as for
// AddHolderFlags.
inline Result<int64_t> HolderPid(const HolderFlags& flags, const char* verb) {
  if (flags.detached) return kNoHolder;
  return ProcessToBindTo(flags.owner_pid, "the reference",
                         std::string("name the process whose reference to ") + verb +
                             " with --owner-pid PID, or use --detached for one bound to no "
                             "process");
}

// Overwrites, in place, the password of every Redis URL among the arguments once they are
// parsed, so that other local users do not read it in ps or /proc/PID/cmdline for as long as the
// tool runs (MCD_REDIS_PASSWORD, MCD_REDIS_PASSWORD_FILE or REDISCLI_AUTH keep it out of the
// command line altogether). True when there was one.
inline bool HidePasswordsInArgv(int argc, char** argv) {
  bool hidden = false;
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    char* scheme = std::strstr(arg, "://");
    if (scheme == nullptr) continue;
    char* start = scheme + 3;
    char* at = std::strchr(start, '@');
    char* colon = std::strchr(start, ':');
    if (at == nullptr || colon == nullptr || colon > at) continue;  // no user:password@
    for (char* c = colon + 1; c < at; ++c) *c = '*';
    hidden = hidden || at > colon + 1;
  }
  return hidden;
}

// The tool's name as its messages begin: argv[0] without its folder.
inline std::string ToolName(const char* argv0) {
  const char* slash = std::strrchr(argv0, '/');
  return slash != nullptr ? slash + 1 : argv0;
}

// Parses argv; on --help/--version prints and returns 0, on a usage error prints the reason
// and returns 64. Returns -1 when the tool should go on.
inline int ParseArgs(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    if (HidePasswordsInArgv(argc, argv)) {
      // As redis-cli warns of -a: the command line is public until the tool hides it.
      std::cerr << ToolName(argv[0])
                << ": warning: a password on the command line may be seen by other local users; "
                   "use MCD_REDIS_PASSWORD or MCD_REDIS_PASSWORD_FILE instead\n";
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << ToolName(argv[0]) << ": error: " << Escaped(e.what()) << "\n"
              << "Run with --help for more information.\n";
    return 64;
  }
  return -1;
}

inline void SetupApp(CLI::App& app) {
  // The build and this machine's driver, asked only when --version is given.
  app.set_version_flag("--version", [] { return std::string(mcd_version_info()); });
  app.footer(kEnvironmentFooter);
  app.get_formatter()->column_width(28);
}

}  // namespace mcd::tools
