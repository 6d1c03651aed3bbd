// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A lifecycle event as the JSON line of `mcd-ls --watch --json`.
#include "memcuda/events.h"
#include "protocol/json_support.h"

namespace mcd {

std::string EventToJson(const LifecycleEvent& e) {
  PooledWriter pooled;
  Writer& w = pooled.w();
  w.StartObject();
  WriteKeyString(w, "id", e.id);
  w.Key("time_ms");
  w.Int64(e.time_ms);
  WriteKeyString(w, "event", e.event);
  WriteKeyString(w, "name", e.name);
  WriteKeyString(w, "node", e.node);
  w.Key("refcount");
  w.Int64(e.refcount);
  w.Key("pid");
  w.Int64(e.pid);
  WriteKeyString(w, "reason", e.reason);
  if (e.event == "gap") {
    w.Key("missed");
    if (e.missed < 0) {
      w.Null();
    } else {
      w.Int64(e.missed);
    }
  }
  w.EndObject();
  assert(w.IsComplete());  // every object and array opened here is closed
  return pooled.str();
}

}  // namespace mcd
