// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "watch.h"

#include <fnmatch.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <regex>
#include <thread>

#include "memcuda/events.h"
#include "tool_common.h"

namespace mcd::tools {

namespace {

// The block of one read: the watch goes on reading after it, whatever came.
constexpr int kBlockMs = 10000;

// Where to start reading: after the newest event (""), after a given id, or `since` back.
Result<std::string> StartAfter(EventStream& events, const std::string& since) {
  if (since.empty()) return events.Newest();
  if (since == "all") return std::string("0-0");
  if (std::regex_match(since, std::regex("[0-9]+-[0-9]+"))) return since;
  MCD_ASSIGN_OR_RETURN(int64_t age_ms, ParseDuration(since));
  // 0 ago is now (EventStream::Since reads 0 as the oldest kept; "all" asks for that).
  return age_ms == 0 ? events.Newest() : events.Since(age_ms);
}

// "HH:MM:SS.mmm" in local time.
std::string ClockTime(int64_t ms) {
  time_t seconds = static_cast<time_t>(ms / 1000);
  tm local{};
  localtime_r(&seconds, &local);
  char text[32];
  std::snprintf(text, sizeof(text), "%02d:%02d:%02d.%03d", local.tm_hour, local.tm_min,
                local.tm_sec, static_cast<int>(ms % 1000));
  return text;
}

std::string TableLine(const std::string& time, const std::string& event, const std::string& name,
                      const std::string& refs, const std::string& node, const std::string& pid,
                      const std::string& reason) {
  char line[1024];
  std::snprintf(line, sizeof(line), "%-12s  %-12s  %-24s  %4s  %-16s  %7s  %s", time.c_str(),
                Escaped(event).c_str(), Escaped(name).c_str(), Escaped(refs).c_str(),
                Escaped(node).c_str(), Escaped(pid).c_str(), Escaped(reason).c_str());
  std::string out = line;
  out.erase(out.find_last_not_of(' ') + 1);
  return out + "\n";
}

// A gap's REASON says how many were lost, and where to look instead.
std::string GapText(const LifecycleEvent& e) {
  std::string lost = e.missed < 0 ? "events" : std::to_string(e.missed) + " event(s)";
  return lost + " trimmed before this watch read them (mcd-serve --event-history): mcd-ls " +
         "shows what is now";
}

std::string Format(const LifecycleEvent& e, bool json) {
  if (json) return EventToJson(e) + "\n";
  if (e.event == "gap") {
    return TableLine(ClockTime(e.time_ms), e.event, "-", "-", "-", "-", GapText(e));
  }
  bool server = e.name.empty();
  return TableLine(ClockTime(e.time_ms), e.event, server ? "-" : e.name,
                   server ? "-" : std::to_string(e.refcount), e.node,
                   e.pid != 0 ? std::to_string(e.pid) : "-", e.reason);
}

}  // namespace

int Watch(const char* tool, const ClientOptions& client, const WatchOptions& options) {
  auto events = EventStream::Open(client.redis_url, client.keys);
  if (!events.ok()) return Fail(tool, events.status());
  auto cursor = StartAfter(*events.value(), options.since);
  if (!cursor.ok()) return Fail(tool, cursor.status());
  if (!options.json && options.headers) {
    std::cout << TableLine("TIME", "EVENT", "NAME", "REFS", "NODE", "PID", "REASON") << std::flush;
  }
  int64_t printed = 0;
  int backoff_ms = 100;
  for (;;) {
    auto got = events.value()->Read(cursor.value(), kBlockMs);
    if (!got.ok()) {
      // Redis went away: say so once, and go on from where the watch was when it is back.
      if (backoff_ms == 100)
        std::cerr << tool << ": " << Escaped(got.status().message()) << "; reconnecting\n";
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min(backoff_ms * 2, 5000);
      if (events.value()->Reconnect().ok()) backoff_ms = 100;
      continue;
    }
    std::string out;
    for (const LifecycleEvent& e : got.value()) {
      cursor = e.id;
      // A gap is shown whatever the filters: the events lost may have passed them. It is no
      // event of --count's.
      if (e.event == "gap") {
        out += Format(e, options.json);
        continue;
      }
      if (!e.name.empty() && fnmatch(options.glob.c_str(), e.name.c_str(), 0) != 0) continue;
      if (!options.node.empty() && e.node != options.node) continue;
      out += Format(e, options.json);
      if (options.count > 0 && ++printed == options.count) break;
    }
    std::cout << out << std::flush;
    if (!std::cout) return 74;  // stdout closed under it
    if (options.count > 0 && printed >= options.count) return 0;
  }
}

}  // namespace mcd::tools
