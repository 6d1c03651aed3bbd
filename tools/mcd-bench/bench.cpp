// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "bench.h"

#include "bandwidth.h"
#include "bare_floor.h"
#include "children.h"
#include "memcuda/polling.h"
#include "report.h"
#include "throughput.h"

namespace mcd::bench {

namespace {

class Bench {
 public:
  Bench(Options opt, tools::CommonFlags flags) : opt_(std::move(opt)), flags_(std::move(flags)) {}

  // Also opens the connection that RedisCpuSeconds reads on.
  Status RedisFloor() {
    auto url = ResolveRedisUrl(flags_.redis_url);
    if (!url.ok()) return url.status();
    auto conn = RedisConnection::Connect(url.value());
    if (!conn.ok()) return conn.status();
    redis_ = std::move(conn.value());
    if (auto server = redis_->Command({"INFO", "server"}); server.ok()) {
      redis_version_ = InfoField(server->str, "redis_version");
    }
    Row row{"redis_rtt", "-", kHostDevice, 0, {}, 0, "PING, one client: the floor"};
    for (int i = 0; i < 50; ++i) (void)redis_->Command({"PING"});
    Timed(row, [&](int) { return redis_->Command({"PING"}).status(); });
    floor_us_ = Percentile(row.us, 0.5);
    rows_.push_back(std::move(row));
    // The same after an idle spell, as most commands of a program that does other work meet
    // Redis: asleep, with every spin given up.
    Row idle{"redis_rtt_idle", "-", kHostDevice, 0, {}, 0, "PING after 1 ms idle, one client"};
    TimedAfterIdle(idle, [&](int) { return redis_->Command({"PING"}).status(); });
    rows_.push_back(std::move(idle));
    return Status::Ok();
  }

  // Every row of one allocator on one device; then whatever of the run's tensors is still there
  // (a failed or stopped row's) is given back.
  Status Allocator(const std::string& kind, int device) {
    Status ran = Rows(kind, device);
    client_.reset();
    auto removed = GiveBackRunTensors(flags_);
    if (!removed.ok()) {
      std::cerr << "mcd-bench: warning: cannot give back the run's tensors: "
                << removed.status().ToString() << "\n";
    } else if (removed.value() > 0 && ran.ok() && !Stopping()) {
      std::cerr << "mcd-bench: warning: the run left " << removed.value()
                << " tensor(s); given back now\n";
    }
    return ran;
  }

  // The rows in order; a stop signal ends the run before the next one.
  Status Rows(const std::string& kind, int device) {
    MCD_ASSIGN_OR_RETURN(client_, Connect(flags_));
    if (!client_->Warmup(device).ok())
      return Status(ErrorCode::kNoDevice, "cannot use device " + DeviceName(device));
    if (device != kHostDevice) cudaSetDevice(device);
    std::vector<std::function<Status()>> rows;
    const bool gpu = device != kHostDevice;
    for (uint64_t bytes : opt_.sizes) {
      if (!Serves(kind, device, bytes)) continue;
      rows.push_back([=] { return Lifecycle(kind, device, bytes); });
      rows.push_back([=] { return FirstGet(kind, device, bytes); });
      if (gpu) rows.push_back([=] { return Keep(BareFirstOpen(opt_, kind, device, bytes)); });
      rows.push_back([=] { return Share(kind, device, bytes, /*existing=*/false); });
      rows.push_back([=] { return Share(kind, device, bytes, /*existing=*/true); });
      if (gpu) {
        rows.push_back([=] { return Keep(BareShare(opt_, kind, device, bytes, BatchOf(bytes))); });
      }
    }
    const uint64_t churn_bytes = 1 << 20;
    for (int clients : opt_.clients)
      rows.push_back([=] { return Throughput(kind, device, churn_bytes, clients); });
    const uint64_t copy_bytes = std::min<uint64_t>(opt_.sizes.back(), 1ull << 30);
    rows.push_back([=] {
      return MeasureBandwidth(*client_, Spec(Name("bw", 0), device, copy_bytes), kind, rows_);
    });
    int gpus = 0;
    if (gpu && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus >= 2) {
      const int peer = device == 0 ? 1 : 0;
      rows.push_back([=] {
        return MeasureCrossDevice(*client_, Spec(Name("xdev", 0), device, copy_bytes), kind, peer,
                                  rows_);
      });
    }
    for (const auto& row : rows) {
      if (Stopping()) return StoppedBySignal();
      MCD_RETURN_IF_ERROR(row());
    }
    return Status::Ok();
  }

  // Whether the server makes a tensor of `bytes` on `device` at all; a size it refuses as too
  // large (the pool's limit) is left out of the run, with a warning. Other errors are left to
  // the rows.
  bool Serves(const std::string& kind, int device, uint64_t bytes) {
    const std::string name = Name("probe", static_cast<int>(bytes >> 20));
    auto made = client_->Create(Spec(name, device, bytes));
    if (made.ok()) {
      (void)client_->Release(name);
      return true;
    }
    if (made.status().code() != ErrorCode::kTooLarge) return true;
    std::cerr << "mcd-bench: " << kind << " refuses " << tools::HumanBytes(bytes)
              << " tensors, its rows of that size are left out: " << made.status().ToString()
              << "\n";
    return false;
  }

  json Record(const json& config) const {
    return RecordOf(rows_, floor_us_, redis_version_, config);
  }

 private:
  // The lifecycle rows keep their tensors alive until the end, under kLiveBudget bytes (at least
  // three tensors); the share rows give theirs back whenever they hold that much.
  static constexpr uint64_t kLiveBudget = 8ull << 30;
  // Tensors a share row holds at once: kLiveBudget's worth, at least one.
  // Bounded so that it fits an int for the smallest sizes too (8 GiB of 1-byte tensors).
  static int BatchOf(uint64_t bytes) {
    uint64_t batch = std::max<uint64_t>(1, kLiveBudget / std::max<uint64_t>(bytes, 1));
    return static_cast<int>(std::min<uint64_t>(batch, 1u << 20));
  }
  int Iterations(uint64_t bytes) const {
    uint64_t fit = std::max<uint64_t>(3, kLiveBudget / std::max<uint64_t>(bytes, 1));
    return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(opt_.iterations), fit));
  }

  // An idle spell before each op of the *_idle rows: longer than any spin of the server, its
  // worker, the client or the kernel's idle polling, so that each op meets them asleep.
  static constexpr std::chrono::milliseconds kIdleSpell{1};

  // As Timed, with `before` then kIdleSpell before each op, outside its time; at most 100 ops.
  template <typename Fn>
  void TimedAfterIdle(Row& row, Fn&& op, const std::function<Status()>& before = nullptr) {
    for (int i = 0; i < std::min(opt_.iterations, 100) && !Stopping(); ++i) {
      if (before) {
        if (Status s = before(); !s.ok()) {
          row.note = s.ToString();
          return;
        }
      }
      std::this_thread::sleep_for(kIdleSpell);
      if (!TimeOne(row, op, i)) return;
    }
  }

  template <typename Fn>
  void Timed(Row& row, Fn&& op) {
    auto deadline = Clock::now() + std::chrono::duration<double>(opt_.max_seconds);
    int iterations = row.bytes != 0 ? Iterations(row.bytes) : opt_.iterations;
    for (int i = 0; i < iterations && Clock::now() < deadline && !Stopping(); ++i) {
      if (!TimeOne(row, op, i)) return;
    }
  }

  // Times op(i) into the row; false (the error in the row's note) when it failed.
  template <typename Fn>
  static bool TimeOne(Row& row, Fn& op, int i) {
    auto t0 = Clock::now();
    Status s = op(i);
    auto t1 = Clock::now();
    if (!s.ok()) {
      row.note = s.ToString();
      return false;
    }
    row.us.push_back(Us(t0, t1));
    return true;
  }

  std::string Name(const std::string& row, int i) const { return TensorName(getpid(), row, i); }

  Status Keep(Result<Row> row) {
    if (!row.ok()) return row.status();
    rows_.push_back(std::move(row).value());
    return Status::Ok();
  }

  CreateSpec Spec(const std::string& name, int device, uint64_t bytes) const {
    CreateSpec spec;
    spec.name = name;
    spec.dtype = DType::kU8;
    spec.shape = {static_cast<int64_t>(bytes)};
    spec.device = device;
    return spec;
  }

  Status Lifecycle(const std::string& kind, int device, uint64_t bytes) {
    Say("create/get/delete " + kind + " " + tools::HumanBytes(bytes));
    Row create{"create", kind, device, bytes, {}, 0, ""},
        get{"get_warm", kind, device, bytes, {}, 0, "get + map, mapping cached in this process"},
        del{"delete", kind, device, bytes, {}, 0, ""};
    std::vector<std::string> names;
    Timed(create, [&](int i) {
      names.push_back(Name("life", i));
      return client_->Create(Spec(names.back(), device, bytes)).status();
    });
    // Warm: the mapping is already open in this process (held by an Open), so a get is the
    // command plus a cache hit.
    for (const auto& n : names) MCD_RETURN_IF_ERROR(client_->Open(n).status());
    for (size_t i = 0; i < names.size(); ++i) {
      auto t0 = Clock::now();
      auto view = client_->Get(names[i]);  // get + map, as the target defines it
      get.us.push_back(Us(t0, Clock::now()));
      MCD_RETURN_IF_ERROR(view.status());
      MCD_RETURN_IF_ERROR(Touch(view.value()));
    }
    for (const auto& n : names) {
      MCD_RETURN_IF_ERROR(client_->Release(n).status());  // the get's reference
      MCD_RETURN_IF_ERROR(client_->Close(n));             // the Open: unmapped now
    }
    for (const auto& n : names) {
      auto t0 = Clock::now();
      auto released = client_->Release(n);  // the last reference: freed
      del.us.push_back(Us(t0, Clock::now()));
      MCD_RETURN_IF_ERROR(released.status());
    }
    rows_.push_back(std::move(create));
    rows_.push_back(std::move(get));
    rows_.push_back(std::move(del));
    return CreateAfterIdle(kind, device, bytes);
  }

  // Creates as most programs make them: each after an idle spell, each tensor given back before
  // the next spell, outside the time.
  Status CreateAfterIdle(const std::string& kind, int device, uint64_t bytes) {
    Row row{"create_idle", kind, device, bytes, {}, 0, "create after 1 ms idle"};
    std::string made;  // the last one, given back before the next spell
    auto give_back = [&]() -> Status {
      if (made.empty()) return Status::Ok();
      Status released = client_->Release(made).status();
      made.clear();
      return released;
    };
    TimedAfterIdle(
        row,
        [&](int i) {
          made = Name("idle", i);
          return client_->Create(Spec(made, device, bytes)).status();
        },
        give_back);
    MCD_RETURN_IF_ERROR(give_back());
    if (!row.note.empty() && row.us.empty()) return Status(ErrorCode::kInternal, row.note);
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  Status FirstGet(const std::string& kind, int device, uint64_t bytes) {
    Row row{"get_first",
            kind,
            device,
            bytes,
            {},
            0,
            "get + map in a fresh process, right after its Client::Warmup"};
    for (int i = 0; i < opt_.fresh; ++i) {
      if (Stopping()) return StoppedBySignal();
      Say("first get in a fresh process " + kind + " " + tools::HumanBytes(bytes) + " " +
          std::to_string(i));
      std::string name = Name("first", i);
      MCD_RETURN_IF_ERROR(client_->Create(Spec(name, device, bytes)).status());
      Child child = SpawnChild(ChildArgs(
          {"--child", "first-get", "--child-device", DeviceName(device), "--child-name", name}));
      std::string line = ReadLine(child.from);
      int rc = WaitChild(child);
      MCD_RETURN_IF_ERROR(client_->Release(name).status());
      std::istringstream parts(line);
      double get_us = 0, connect_us = 0;
      if (rc != 0 || !(parts >> get_us >> connect_us)) {
        return Status(ErrorCode::kInternal,
                      "first-get child failed (exit " + std::to_string(rc) + ")");
      }
      row.us.push_back(get_us);
      row.connect_us.push_back(connect_us);
    }
    row.note +=
        "; its Client::Connect before, median " + Whole(Percentile(row.connect_us, 0.5)) + " us";
    rows_.push_back(std::move(row));
    return FirstRoundTrip(kind, device, bytes);
  }

  // The floor of get_first's round trip: what a fresh process's first command to a Redis that
  // was idle while the process started takes, with nothing of memcuda's in the way.
  Status FirstRoundTrip(const std::string& kind, int device, uint64_t bytes) {
    Row row{"rtt_first",
            kind,
            device,
            bytes,
            {},
            0,
            "a fresh process's first Redis round trip (PING), context up: the floor of get_first's "
            "reference"};
    for (int i = 0; i < opt_.fresh; ++i) {
      if (Stopping()) return StoppedBySignal();
      Child child =
          SpawnChild(ChildArgs({"--child", "first-rtt", "--child-device", DeviceName(device)}));
      std::string line = ReadLine(child.from);
      int rc = WaitChild(child);
      double us = 0;
      std::istringstream parts(line);
      if (rc != 0 || !(parts >> us)) {
        return Status(ErrorCode::kInternal,
                      "first-rtt child failed (exit " + std::to_string(rc) + ")");
      }
      row.us.push_back(us);
    }
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  // A tensor of this run, created and filled with ones through a mapping of this process, which
  // stays held (a reference more to give back).
  Status MakeFilled(const std::string& name, int device, uint64_t bytes) {
    MCD_RETURN_IF_ERROR(client_->Create(Spec(name, device, bytes)).status());
    MCD_ASSIGN_OR_RETURN(TensorView view, client_->Get(name));
    if (device == kHostDevice) {
      std::memset(view.data, 1, bytes);
      return Status::Ok();
    }
    cudaError_t err = cudaMemset(view.data, 1, bytes);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    return err == cudaSuccess ? Status::Ok()
                              : Status(ErrorCode::kCudaError, cudaGetErrorString(err));
  }

  // "share" (fresh): the create is timed, A creates the tensor, B gets, maps and touches it and
  // acknowledges. "share_existing": A's tensor was created and filled (through A's own mapping,
  // kept) before the clock starts, which then times A's handover of the name to B's
  // acknowledgement. Both sides give their references back outside the time, in batches of
  // kLiveBudget (the peer's script does the same), so that large sizes reach a steady state
  // in which freed memory is used again.
  Status Share(const std::string& kind, int device, uint64_t bytes, bool existing) {
    const std::string tag = existing ? "shareold" : "share";
    Say("share end to end " + std::string(existing ? "(existing) " : "") + kind + " " +
        tools::HumanBytes(bytes));
    Row row{existing ? "share_existing" : "share",
            kind,
            device,
            bytes,
            {},
            0,
            existing
                ? "a tensor A made and filled before the clock: name to B, get+map+touch in B, "
                  "ack to A"
                : "create in A, get+map+touch in B, ack to A"};
    Child consumer =
        SpawnChild(ChildArgs({"--child", "share", "--child-device", DeviceName(device)}));
    if (ReadLine(consumer.from) != "ready")
      return Status(ErrorCode::kInternal, "share consumer did not start");
    std::vector<std::string> live;  // handed over, not given back yet
    int made = 0;  // existing: Name(tag, 0) to Name(tag, made - 1) were made and filled
    auto deadline = Clock::now() + std::chrono::duration<double>(opt_.max_seconds);
    Status failed;
    for (int i = 0; failed.ok() && i < opt_.iterations && Clock::now() < deadline && !Stopping();
         ++i) {
      // Existing tensors are made a batch at a time, ahead of their handovers: a tensor that
      // exists was not allocated a moment ago (the driver makes the first open of an allocation
      // that new wait: ~0.7 ms for 1 GiB on an H200, with CUDA alone too).
      if (existing && i == made) {
        auto making = Clock::now();
        for (int end = std::min(opt_.iterations, i + BatchOf(bytes)); made < end && failed.ok();
             ++made)
          failed = MakeFilled(Name(tag, made), device, bytes);
        if (!failed.ok()) break;
        deadline += Clock::now() - making;  // the row's time bound counts handovers only
      }
      const std::string name = Name(tag, i);
      auto t0 = Clock::now();
      if (!existing && !(failed = client_->Create(Spec(name, device, bytes)).status()).ok()) break;
      double create_us = Us(t0, Clock::now());
      live.push_back(name);
      std::string ack = Ask(consumer, name);
      std::istringstream parts(ack);
      std::string ok;
      double get_us = 0, touch_us = 0;
      if (!(parts >> ok >> get_us >> touch_us) || ok != "ok") {
        failed = Status(ErrorCode::kInternal, "consumer: " + ack);
        break;
      }
      row.us.push_back(Us(t0, Clock::now()));
      if (!existing) row.create_us.push_back(create_us);
      row.get_us.push_back(get_us);
      row.touch_us.push_back(touch_us);
      if (live.size() >= static_cast<size_t>(BatchOf(bytes)))
        failed = GiveBackShared(consumer, live, existing, row);
    }
    if (failed.ok()) failed = GiveBackShared(consumer, live, existing, row);
    for (int i = static_cast<int>(row.us.size()); failed.ok() && i < made; ++i) {
      // Made, never handed over: A's two references.
      failed = client_->Release(Name(tag, i)).status();
      if (failed.ok()) failed = client_->Release(Name(tag, i)).status();
    }
    WaitChild(consumer);
    MCD_RETURN_IF_ERROR(failed);  // what is left is given back after the rows (Allocator)
    auto median = [](const std::vector<double>& us) { return Whole(Percentile(us, 0.5)); };
    row.note += "; medians: " + (existing ? "" : "create " + median(row.create_us) + " us, ") +
                "get+map " + median(row.get_us) + " us, touch " + median(row.touch_us) + " us";
    if (!row.release_us.empty()) {
      row.note += "; B's release (unmap + reference): first " + Whole(row.release_us.front()) +
                  " us, median " + Whole(Percentile(row.release_us, 0.5)) + " us";
    }
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  // Outside the share row's time: B's reference to each tensor handed over (its release timed
  // apart, for the note: the process's first unmap may cost more), then A's.
  Status GiveBackShared(Child& consumer, std::vector<std::string>& live, bool existing, Row& row) {
    for (const std::string& name : live) {
      std::istringstream done(Ask(consumer, "release " + name));
      std::string word;
      double us = 0;
      if (!(done >> word >> us) || word != "done")
        return Status(ErrorCode::kInternal, "consumer: " + done.str());
      row.release_us.push_back(us);
      if (existing) MCD_RETURN_IF_ERROR(client_->Release(name).status());  // A's fill mapping
      MCD_RETURN_IF_ERROR(client_->Release(name).status());
    }
    live.clear();
    return Status::Ok();
  }

  Status Throughput(const std::string& kind, int device, uint64_t bytes, int clients) {
    MCD_ASSIGN_OR_RETURN(Row row, MeasureThroughput(opt_, redis_.get(), *client_, kind, device,
                                                    bytes, clients, ChildArgs({})));
    rows_.push_back(std::move(row));
    return Status::Ok();
  }

  std::vector<std::string> ChildArgs(std::vector<std::string> extra) const {
    std::vector<std::string> args = extra;
    if (!flags_.redis_url.empty()) args.insert(args.end(), {"--redis-url", flags_.redis_url});
    if (!flags_.node.empty()) args.insert(args.end(), {"--node", flags_.node});
    args.insert(args.end(), {"--prefix", flags_.prefix, "--queue", flags_.queue, "--timeout-ms",
                             std::to_string(flags_.timeout_ms)});
    return args;
  }

  Options opt_;
  tools::CommonFlags flags_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<RedisConnection> redis_;  // the floor's PINGs, then Redis's CPU time
  std::string redis_version_;               // from INFO server, for the record
  std::vector<Row> rows_;
  double floor_us_ = 0;
};

}  // namespace

Result<json> MeasureAllocator(const Options& opt, const tools::CommonFlags& flags,
                              const std::string& kind, int device, const json& config) {
  Bench one(opt, flags);
  MCD_RETURN_IF_ERROR(one.RedisFloor());
  Status ran = one.Allocator(kind, device);
  if (Stopping()) return StoppedBySignal();
  MCD_RETURN_IF_ERROR(ran);
  return one.Record(config);
}

}  // namespace mcd::bench
