// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The server's serving parts over a real redis-server and host memory, for the unit tests of the
// modules that work on them (applier, reaper, resettle): the serving connection's pipeline, the
// intake, a host-only device set, the tensor table and the applier, with helpers that apply
// commands taken from the list and read what Redis holds. Main thread only.
#pragma once

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/applier.h"
#include "server/server_options.h"
#include "test_support.h"

namespace mcd {
namespace test {

ServerOptions Options(const RedisServer& redis) {
  ServerOptions opt;
  opt.redis_url = redis.parsed_url();
  opt.node = "n1";
  opt.all_devices = false;  // host memory only
  return opt;
}

class ServingTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pipeline_.LoadScript().ok()); }
  ~ServingTest() override {
    devices_.reset();
    for (const std::string& n : ShmObjects(prefix_.substr(1))) shm_unlink(("/" + n).c_str());
  }

  // Takes `raws` from the list as the intake does (each waits in the processing list) and
  // applies them as one batch; their commits are sent, not read.
  void Apply(const std::vector<std::string>& raws) {
    std::vector<Request> requests;
    for (const std::string& raw : raws) {
      ASSERT_TRUE(side_->Command({"LPUSH", processing_, raw}).ok());
      requests.push_back(Intake::FromList(raw));
    }
    applier_.ProcessBatch(std::move(requests));
  }
  std::map<std::string, std::string> Hash(const std::string& name) {
    auto v = side_->Command({"HGETALL", opt_.keys.Tensor(name)});
    return v.ok() ? FieldMap(v.value()) : std::map<std::string, std::string>{};
  }
  bool Holds(const std::string& holder) {
    auto v = side_->Command({"SISMEMBER", opt_.keys.Holders("n1"), holder});
    return v.ok() && v->integer == 1;
  }
  // A create of host tensor `name` (4 KiB) by process 77, with `extra` fields (",\"k\":v").
  static std::string Create(const std::string& name, const std::string& req,
                            const std::string& extra = "") {
    return R"({"op":"create","name":")" + name +
           R"(","dtype":"f32","shape":[4,256],"device":"cpu","req":")" + req + R"(","pid":77)" +
           extra + "}";
  }
  static bool ShmExists(const std::string& name) {
    return access(("/dev/shm" + name).c_str(), F_OK) == 0;
  }

  RedisServer redis_;
  ServerOptions opt_ = Options(redis_);
  std::string processing_ = opt_.keys.Processing("n1");
  std::string prefix_ = "/mcd-unit-" + std::to_string(getpid()) + "-serving-";
  std::unique_ptr<RedisConnection> side_ = redis_.Connect();
  CommitPipeline pipeline_{redis_.Connect(), CommitOptionsOf(opt_), "inst1"};
  Waker waker_{redis_.parsed_url(), opt_.keys.NodeQueue("n1")};
  Intake intake_{opt_.keys.NodeQueue("n1"), processing_, waker_};
  std::unique_ptr<DeviceSet> devices_ = DeviceSet::Open(DeviceSetOptionsOf(opt_), prefix_).value();
  TensorTable table_;
  OutcomeLog outcomes_;
  NodeCopier copier_{NodeCopierOptionsOf(opt_), pipeline_, table_, *devices_, nullptr, "off"};
  CommandApplier applier_{ApplierOptions{opt_.keys, "n1", "inst1"},
                          pipeline_,
                          intake_,
                          table_,
                          *devices_,
                          outcomes_,
                          copier_};
};

}  // namespace test
}  // namespace mcd
