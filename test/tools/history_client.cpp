// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// A client process of the history test: creates a tensor (on MCD_HISTORY_DEVICE, host memory by
// default) from a file's bytes, reads one
// into a file, or takes references and holds them until it is killed, through libmemcuda's C++
// API or its C ABI.
//
//   history_client URL NODE TIMEOUT_MS lib|c create NAME FILE   # u8[size of FILE], ready filled
//   history_client URL NODE TIMEOUT_MS lib|c read NAME FILE     # get, copy out, release
//   history_client URL NODE TIMEOUT_MS lib|c hold NAME...       # "NAME CODE" each, then "held"
//
// Exit codes are the tools' table (memcuda/status.h: ExitCodeFor).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "memcuda/client.h"
#include "memcuda/memcuda.h"

namespace {

// The device the test's tensors live on (history_workload.h).
int Device() {
  const char* text = std::getenv("MCD_HISTORY_DEVICE");
  auto device = mcd::ParseDevice(text != nullptr && *text != '\0' ? text : "cpu");
  return device.ok() ? device.value() : mcd::kHostDevice;
}

// The three operations, through one of the two interfaces. Each returns an exit code and leaves
// what went wrong in error().
class Api {
 public:
  virtual ~Api() = default;
  virtual int Create(const std::string& name, const std::string& bytes) = 0;
  virtual int Read(const std::string& name, std::string* bytes) = 0;
  virtual int Hold(const std::string& name) = 0;
  const std::string& error() const { return error_; }

 protected:
  int Failed(const mcd::Status& status) {
    error_ = status.ToString();
    return mcd::ExitCodeFor(status.code());
  }
  std::string error_;
};

class CppApi : public Api {
 public:
  explicit CppApi(std::unique_ptr<mcd::Client> client) : client_(std::move(client)) {}

  // Ready once filled: the library fills and publishes it, or leaves nothing.
  int Create(const std::string& name, const std::string& bytes) override {
    mcd::CreateSpec spec;
    spec.name = name;
    spec.dtype = mcd::DType::kU8;
    spec.shape = {static_cast<int64_t>(bytes.size())};
    spec.device = Device();
    spec.contents = bytes.data();
    spec.contents_bytes = bytes.size();
    auto created = client_->Create(spec);
    return created.ok() ? 0 : Failed(created.status());
  }

  int Read(const std::string& name, std::string* bytes) override {
    auto view = client_->Get(name);
    if (!view.ok()) return Failed(view.status());
    bytes->resize(view->record.bytes);
    mcd::Status copied = client_->CopyToHost(view.value(), bytes->data(), bytes->size());
    auto released = client_->Release(name);
    if (!copied.ok()) return Failed(copied);
    return released.ok() ? 0 : Failed(released.status());
  }

  int Hold(const std::string& name) override {
    auto view = client_->Get(name);
    return view.ok() ? 0 : Failed(view.status());
  }

 private:
  std::unique_ptr<mcd::Client> client_;
};

class CApi : public Api {
 public:
  explicit CApi(mcd_client* client) : client_(client) {}
  ~CApi() override { mcd_disconnect(client_); }

  // Ready once filled, as the library's: mcd_create_ex with the bytes as its data.
  int Create(const std::string& name, const std::string& bytes) override {
    int64_t shape[1] = {static_cast<int64_t>(bytes.size())};
    mcd_create_options options{};
    options.size = sizeof(options);
    options.data = bytes.data();
    options.data_bytes = bytes.size();
    int32_t rc = mcd_create_ex(client_, name.c_str(), "u8", shape, 1, Device(), &options, nullptr);
    return rc == MCD_OK ? 0 : Failed(rc);
  }

  // Reads through the mapping mcd_get hands out: in place for host memory, copied out of GPU
  // memory by mcd_copy_to_host.
  int Read(const std::string& name, std::string* bytes) override {
    mcd_tensor tensor;
    int32_t rc = mcd_get(client_, name.c_str(), &tensor);
    if (rc != MCD_OK) return Failed(rc);
    if (tensor.device == MCD_DEVICE_CPU) {
      bytes->assign(static_cast<const char*>(tensor.data), tensor.bytes);
    } else {
      bytes->resize(tensor.bytes);
      rc = mcd_copy_to_host(client_, name.c_str(), bytes->data(), tensor.bytes);
      if (rc != MCD_OK) {
        (void)mcd_release(client_, name.c_str());
        return Failed(rc);
      }
    }
    rc = mcd_release(client_, name.c_str());
    return rc == MCD_OK ? 0 : Failed(rc);
  }

  int Hold(const std::string& name) override {
    mcd_tensor tensor;
    int32_t rc = mcd_get(client_, name.c_str(), &tensor);
    return rc == MCD_OK ? 0 : Failed(rc);
  }

 private:
  int Failed(int32_t rc) {
    error_ = std::string(mcd_error_name(rc)) + ": " + mcd_last_error(client_);
    return mcd::ExitCodeFor(static_cast<mcd::ErrorCode>(rc));
  }
  mcd_client* client_;
};

std::unique_ptr<Api> Connect(const std::string& api, const std::string& url,
                             const std::string& node, int timeout_ms, int* exit_code) {
  if (api == "c") {
    mcd_client* client = nullptr;
    int32_t rc = mcd_connect(url.c_str(), node.c_str(), timeout_ms, &client);
    if (rc == MCD_OK) return std::make_unique<CApi>(client);
    std::fprintf(stderr, "history_client: connect: %s: %s\n", mcd_error_name(rc),
                 mcd_last_error(nullptr));
    *exit_code = mcd::ExitCodeFor(static_cast<mcd::ErrorCode>(rc));
    return nullptr;
  }
  auto parsed = mcd::RedisUrl::Parse(url);
  if (!parsed.ok()) {
    *exit_code = 64;
    return nullptr;
  }
  mcd::ClientOptions options;
  options.redis_url = parsed.value();
  options.node = node;
  options.timeout_ms = timeout_ms;
  auto client = mcd::Client::Connect(options);
  if (client.ok()) return std::make_unique<CppApi>(std::move(client).value());
  std::fprintf(stderr, "history_client: connect: %s\n", client.status().ToString().c_str());
  *exit_code = mcd::ExitCodeFor(client.status().code());
  return nullptr;
}

int Report(const Api& api, const char* what, int code) {
  if (code != 0) std::fprintf(stderr, "history_client: %s: %s\n", what, api.error().c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr,
                 "usage: history_client URL NODE TIMEOUT_MS lib|c create|read|hold NAME...\n");
    return 64;
  }
  const std::string op = argv[5];
  int exit_code = 0;
  auto api = Connect(argv[4], argv[1], argv[2], std::atoi(argv[3]), &exit_code);
  if (!api) return exit_code;
  if (op == "create" && argc == 8) {
    std::ifstream in(argv[7], std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    return Report(*api, "create", api->Create(argv[6], bytes.str()));
  }
  if (op == "read" && argc == 8) {
    std::string bytes;
    int code = api->Read(argv[6], &bytes);
    if (code != 0) return Report(*api, "read", code);
    std::ofstream out(argv[7], std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    return out ? 0 : 74;
  }
  if (op == "hold") {
    // Every name is tried, so that the test knows exactly which references this process holds.
    for (int i = 6; i < argc; ++i) {
      int code = api->Hold(argv[i]);
      if (code != 0)
        std::fprintf(stderr, "history_client: %s: %s\n", argv[i], api->error().c_str());
      std::printf("%s %d\n", argv[i], code);
    }
    std::printf("held\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  std::fprintf(stderr, "history_client: unknown operation '%s' or wrong arguments\n", op.c_str());
  return 64;
}
