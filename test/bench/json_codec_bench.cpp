// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The measurement behind the protocol's JSON codec (docs/design.md, "JSON codec"): what the
// server pays per create to parse the command and write the record, with the codec (RapidJSON)
// and with nlohmann_json doing the same work. Run on the host whose create it is compared with:
//   build/bin/json_codec_bench [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "memcuda/protocol.h"

namespace {

template <typename Work>
double MicrosPerCall(int n, Work&& work) {
  for (int i = 0; i < n / 10; ++i) work();  // warm caches and the allocator
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) work();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
         n;
}

}  // namespace

int main(int argc, char** argv) {
  using nlohmann::json;
  int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  const std::string command =
      R"({"op":"create","name":"bench.tensor.0001","req":"gpu-host-01-12345-abcd-17","node":"gpu-host-01",)"
      R"("pid":12345,"dtype":"f32","shape":[256,1024],"device":0})";
  mcd::TensorRecord r;
  r.name = "bench.tensor.0001";
  r.dtype = mcd::DType::kF32;
  r.shape = {256, 1024};
  r.device = 0;
  r.bytes = 1 << 20;
  r.ipc_kind = mcd::IpcKind::kCudaIpc;
  r.ipc_handle = std::string(64, '\x5a');
  r.refcount = 1;
  r.state = "ready";
  r.ctime_ms = 1764000000000;
  r.node = "gpu-host-01";
  r.owner = "0123456789abcdef";
  r.creator_pid = 12345;
  volatile size_t sink = 0;

  double codec_parse = MicrosPerCall(n, [&] { sink = sink + mcd::ParseCommand(command)->bytes; });
  double nlohmann_parse = MicrosPerCall(n, [&] {
    json doc = json::parse(command);
    sink = sink + doc["name"].get_ref<const std::string&>().size() + doc["shape"][0].get<size_t>();
  });
  double codec_write = MicrosPerCall(n, [&] { sink = sink + mcd::RecordJsonHead(r).size(); });
  double nlohmann_write = MicrosPerCall(n, [&] {
    json doc = {{"bytes", r.bytes},       {"creator_pid", r.creator_pid},
                {"ctime", r.ctime_ms},    {"device", r.device},
                {"dtype", "f32"},         {"ipc_handle_hex", mcd::HexEncode(r.ipc_handle)},
                {"ipc_kind", "cuda_ipc"}, {"lifetime", "heap"},
                {"name", r.name},         {"node", r.node},
                {"offset", r.offset},     {"owner", r.owner},
                {"shape", r.shape},       {"state", r.state}};
    sink = sink + doc.dump(-1, ' ', false, json::error_handler_t::replace).size();
  });
  std::printf(
      "{\"iterations\":%d,\"codec_parse_us\":%.3f,\"codec_write_us\":%.3f,"
      "\"nlohmann_parse_us\":%.3f,\"nlohmann_write_us\":%.3f,\"codec_per_create_us\":%.3f,"
      "\"nlohmann_per_create_us\":%.3f}\n",
      n, codec_parse, codec_write, nlohmann_parse, nlohmann_write, codec_parse + codec_write,
      nlohmann_parse + nlohmann_write);
  return sink == 42 ? 1 : 0;
}
