// The lifecycle on a real GPU: mcd-serve allocates with cudaMalloc and exports a CUDA IPC handle,
// other processes open it, write it and read it back. Skipped without a CUDA device.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "memcuda/client.h"
#include "memcuda/keys.h"
#include "test_support.h"

namespace mcd {
namespace {

class GpuLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
    redis_ = std::make_unique<test::RedisServer>();
    node_ = "gpu" + std::to_string(getpid());
    server_ = std::make_unique<test::Background>(
        std::vector<std::string>{test::ToolPath("mcd-serve"), "--devices", "0", "--node", node_},
        Env(), dir_.path() + "/serve.log");
    ASSERT_TRUE(test::WaitFor([&] {
      auto r = redis_->Connect()->Command({"EXISTS", KeySpace().Server(node_)});
      return r.ok() && r->integer == 1;
    }, 20000)) << test::ReadFile(dir_.path() + "/serve.log");
  }
  std::map<std::string, std::string> Env() const { return {{"MCD_REDIS_URL", redis_->url()}}; }
  test::ProcessResult Tool(const std::string& tool, std::vector<std::string> args) {
    std::vector<std::string> argv = {test::ToolPath(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--node", node_});
    return test::Run(argv, Env());
  }

  test::TempDir dir_;
  std::unique_ptr<test::RedisServer> redis_;
  std::string node_;
  std::unique_ptr<test::Background> server_;
};

TEST_F(GpuLifecycle, CreateFromNpyReadBackInAnotherProcessAndScaleInPlace) {
  std::string in = dir_.path() + "/in.npy";
  {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1024,), }";
    header += std::string(64 - (10 + header.size() + 1) % 64, ' ') + "\n";
    std::ofstream out(in, std::ios::binary);
    out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(header.size()) << '\x00' << header;
    for (int i = 0; i < 1024; ++i) {
      float v = static_cast<float>(i) * 0.5f + 1.0f;
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  auto created = Tool("mcd-create", {"g", "--from", in, "--device", "0", "--json"});
  ASSERT_EQ(created.exit_code, 0) << created.err << test::ReadFile(dir_.path() + "/serve.log");
  auto record = nlohmann::json::parse(created.out);
  EXPECT_EQ(record["ipc_kind"], "cuda_ipc");
  EXPECT_EQ(record["ipc_handle_hex"].get<std::string>().size(), 128u);
  std::string out = dir_.path() + "/out.npy";
  ASSERT_EQ(Tool("mcd-get", {"g", "--no-ref", "-o", out}).exit_code, 0);
  EXPECT_EQ(test::ReadFile(out), test::ReadFile(in));  // byte for byte through CUDA IPC

  auto scaled = Tool("mcd-example-scale", {"g", "2"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  auto printed = Tool("mcd-get", {"g", "--no-ref", "--print", "3"});
  // (i * 0.5 + 1) * 2 + 1 for i = 0, 1, 2
  EXPECT_NE(printed.out.find("values:    3,4,5,..."), std::string::npos) << printed.out;

  ASSERT_EQ(Tool("mcd-rm", {"g"}).exit_code, 0);
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "");
  EXPECT_EQ(server_->Stop(SIGTERM), 0);
}

TEST_F(GpuLifecycle, OutOfMemoryIsCleanAndOthersSurvive) {
  ASSERT_EQ(Tool("mcd-create", {"small", "--dtype", "f32", "--shape", "256", "--device", "0"}).exit_code, 0);
  auto oom = Tool("mcd-create", {"huge", "--dtype", "u8", "--shape", "1099511627776", "--device", "0"});
  EXPECT_EQ(oom.exit_code, 69);
  EXPECT_NE(oom.err.find("out_of_memory"), std::string::npos) << oom.err;
  EXPECT_NE(oom.err.find("requested 1099511627776 bytes"), std::string::npos) << oom.err;
  auto small = Tool("mcd-get", {"small", "--no-ref", "--print", "2"});
  EXPECT_EQ(small.exit_code, 0) << small.err;
  EXPECT_EQ(Tool("mcd-ls", {"-q"}).out, "small\n");
}

}  // namespace
}  // namespace mcd
