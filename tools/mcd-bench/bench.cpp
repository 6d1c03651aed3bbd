#include "bench.h"

#include "bandwidth.h"
#include "bare_floor.h"
#include "children.h"
#include "memcuda/polling.h"
#include "report.h"

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
    return Status::Ok();
  }

  // Redis's CPU time so far (INFO cpu: user + system of the whole redis-server process), in
  // seconds; negative when it cannot be read (an INFO that is not allowed, say).
  double RedisCpuSeconds() {
    if (!redis_) return -1;  // RedisFloor has not run
    auto info = redis_->Command({"INFO", "cpu"});
    if (!info.ok() || info->type == RedisValue::Type::kError) return -1;
    double total = 0;
    for (const char* field : {"used_cpu_sys", "used_cpu_user"}) {
      std::string value = InfoField(info->str, field);
      if (value.empty()) return -1;
      total += std::strtod(value.c_str(), nullptr);
    }
    return total;
  }

  // CPU time so far (user + system, seconds) of the server process and of its command thread
  // (the main thread, whose tid is the pid), from /proc; negative when unknown.
  std::pair<double, double> ServerCpuSeconds() {
    if (!client_) return {-1, -1};
    auto info = client_->ServerInfo();
    if (!info.ok() || info->count("pid") == 0) return {-1, -1};
    const std::string pid = info->at("pid");
    return {ProcCpuSeconds("/proc/" + pid + "/stat"),
            ProcCpuSeconds("/proc/" + pid + "/task/" + pid + "/stat")};
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
    rows.push_back([=] { return MeasureBandwidth(*client_, Spec(Name("bw", 0), device, copy_bytes), kind, rows_); });
    int gpus = 0;
    if (gpu && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus >= 2) {
      const int peer = device == 0 ? 1 : 0;
      rows.push_back([=] {
        return MeasureCrossDevice(*client_, Spec(Name("xdev", 0), device, copy_bytes), kind, peer, rows_);
      });
    }
    for (const auto& row : rows) {
      if (Stopping()) return StoppedBySignal();
      MCD_RETURN_IF_ERROR(row());
    }
    return Status::Ok();
  }

  json Record(const json& config) const {
    return RecordOf(rows_, floor_us_, redis_version_, config);
  }

 private:
  // The lifecycle rows keep their tensors alive until the end, under kLiveBudget bytes (at least
  // three tensors); the share rows give theirs back whenever they hold that much.
  static constexpr uint64_t kLiveBudget = 8ull << 30;
  // Tensors a share row holds at once: kLiveBudget's worth, at least one.
  static int BatchOf(uint64_t bytes) {
    return static_cast<int>(std::max<uint64_t>(1, kLiveBudget / std::max<uint64_t>(bytes, 1)));
  }
  int Iterations(uint64_t bytes) const {
    uint64_t fit = std::max<uint64_t>(3, kLiveBudget / std::max<uint64_t>(bytes, 1));
    return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(opt_.iterations), fit));
  }

  template <typename Fn>
  void Timed(Row& row, Fn&& op) {
    auto deadline = Clock::now() + std::chrono::duration<double>(opt_.max_seconds);
    int iterations = row.bytes != 0 ? Iterations(row.bytes) : opt_.iterations;
    for (int i = 0; i < iterations && Clock::now() < deadline && !Stopping(); ++i) {
      auto t0 = Clock::now();
      Status s = op(i);
      auto t1 = Clock::now();
      if (!s.ok()) {
        row.note = s.ToString();
        return;
      }
      row.us.push_back(Us(t0, t1));
    }
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
    return err == cudaSuccess ? Status::Ok() : Status(ErrorCode::kCudaError, cudaGetErrorString(err));
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
    Row row{existing ? "share_existing" : "share", kind, device, bytes, {}, 0,
            existing ? "a tensor A made and filled before the clock: name to B, get+map+touch in B, "
                       "ack to A"
                     : "create in A, get+map+touch in B, ack to A"};
    Child consumer =
        SpawnChild(ChildArgs({"--child", "share", "--child-device", DeviceName(device)}));
    if (ReadLine(consumer.from) != "ready")
      return Status(ErrorCode::kInternal, "share consumer did not start");
    std::vector<std::string> live;   // handed over, not given back yet
    std::vector<std::string> ready;  // existing: made and filled, not handed over yet
    auto deadline = Clock::now() + std::chrono::duration<double>(opt_.max_seconds);
    Status failed;
    for (int i = 0; failed.ok() && i < opt_.iterations && Clock::now() < deadline && !Stopping(); ++i) {
      // Existing tensors are made a batch at a time, ahead of their handovers: a tensor that
      // exists was not allocated a moment ago (the driver makes the first open of an allocation
      // that new wait: ~0.7 ms for 1 GiB on an H200, with CUDA alone too).
      if (existing && ready.empty()) {
        for (int j = i; j < std::min(opt_.iterations, i + BatchOf(bytes)) && failed.ok(); ++j) {
          ready.push_back(Name(tag, j));
          failed = MakeFilled(ready.back(), device, bytes);
        }
        if (!failed.ok()) break;
      }
      const std::string name = Name(tag, i);
      if (existing) ready.erase(ready.begin());  // its front: `name`
      auto t0 = Clock::now();
      if (!existing && !(failed = client_->Create(Spec(name, device, bytes)).status()).ok()) break;
      double create_us = Us(t0, Clock::now());
      live.push_back(name);
      std::fprintf(consumer.to, "%s\n", name.c_str());
      std::fflush(consumer.to);
      std::string ack = ReadLine(consumer.from);
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
      if (live.size() >= static_cast<size_t>(BatchOf(bytes))) failed = GiveBackShared(consumer, live, existing, row);
    }
    if (failed.ok()) failed = GiveBackShared(consumer, live, existing, row);
    for (const std::string& name : ready) {  // made, never handed over: A's two references
      if (failed.ok()) failed = client_->Release(name).status();
      if (failed.ok()) failed = client_->Release(name).status();
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
      std::fprintf(consumer.to, "release %s\n", name.c_str());
      std::fflush(consumer.to);
      std::istringstream done(ReadLine(consumer.from));
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
    Say("throughput with " + std::to_string(clients) + " clients " + kind);
    double seconds = std::min(opt_.max_seconds, 3.0);
    std::vector<Child> children;
    double cpu0 = RedisCpuSeconds();
    auto [server0, thread0] = ServerCpuSeconds();
    auto t0 = Clock::now();
    for (int c = 0; c < clients; ++c) {
      children.push_back(
          SpawnChild(ChildArgs({"--child", "churn", "--child-device", DeviceName(device),
                                "--child-bytes", std::to_string(bytes), "--child-seconds",
                                std::to_string(seconds), "--child-id", std::to_string(c)})));
    }
    Row row{"create+delete_x" + std::to_string(clients),
            kind,
            device,
            bytes,
            {},
            0,
            std::to_string(clients) + (clients == 1 ? " client process" : " client processes") +
                ", create+delete pairs"};
    for (Child& child : children) {
      std::istringstream in(ReadLine(child.from));
      size_t pairs = 0, read = 0;
      in >> pairs;
      for (double create_us, delete_us; in >> create_us >> delete_us; ++read) {
        row.create_us.push_back(create_us);
        row.delete_us.push_back(delete_us);
        row.us.push_back(create_us + delete_us);
      }
      if (WaitChild(child) != 0) return Status(ErrorCode::kInternal, "a throughput client failed");
      if (read != pairs || pairs == 0) {
        return Status(ErrorCode::kInternal, "a throughput client reported " +
                                                std::to_string(pairs) + " pairs but " +
                                                std::to_string(read) + " latencies");
      }
    }
    double wall = Us(t0, Clock::now()) / 1e6;
    double cpu1 = RedisCpuSeconds();
    auto [server1, thread1] = ServerCpuSeconds();
    row.ops_per_s = static_cast<double>(row.us.size()) / std::max(wall, seconds);
    if (cpu0 >= 0 && cpu1 >= cpu0 && !row.us.empty()) {
      // Which of Redis and the server bounds the rate: Redis's CPU per pair, and how busy it was.
      row.redis_cpu_us = (cpu1 - cpu0) * 1e6 / static_cast<double>(row.us.size());
      row.note += "; Redis CPU " + Whole(row.redis_cpu_us) + " us per pair, " +
                  Whole((cpu1 - cpu0) * 100 / wall) + "% busy";
    }
    if (server0 >= 0 && server1 >= server0 && thread0 >= 0 && thread1 >= thread0 &&
        !row.us.empty()) {
      row.server_cpu_us = (server1 - server0) * 1e6 / static_cast<double>(row.us.size());
      row.server_thread_busy = (thread1 - thread0) / wall;
      row.note += "; server CPU " + Whole(row.server_cpu_us) + " us per pair, its command thread " +
                  Whole(row.server_thread_busy * 100) + "% busy";
    }
    row.note += "; p99 of the create " + Whole(Percentile(row.create_us, 0.99)) +
                " us, of the delete " + Whole(Percentile(row.delete_us, 0.99)) + " us";
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
