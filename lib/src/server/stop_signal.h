// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's stop: asked once, from any thread (a signal handler's thread, the heartbeat
// thread when the node was taken over, Server::RequestStop), and seen by every loop that runs
// until it (the serving loop, the heartbeat thread, which sleeps on it between beats). Owned by
// the server; its loops hold a reference. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace mcd {

class StopSignal {
 public:
  // Asks for the stop and wakes every Wait. Idempotent.
  void Request() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
  }
  bool requested() const { return stop_.load(); }
  // Sleeps `timeout` or until the stop is asked; true when it was.
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return wake_.wait_for(lock, timeout, [this] { return stop_.load(); });
  }

 private:
  std::atomic<bool> stop_{false};  // written under mutex_, so that no Wait misses it
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace mcd
