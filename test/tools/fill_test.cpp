// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Ready means filled: a tensor created with contents (mcd-create --from, CreateSpec::contents, the
// C ABI's and Python's data) is "creating" until its filler has written every byte and published
// it; gets answer not_ready meanwhile, waits wait through it, no event names it, and a filler
// that dies or gives up leaves nothing. Real redis-server, mcd-serve and tools, host tensors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

using test::RandomBytes;

// A u8[n] .npy file of `data`.
void WriteNpy(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << test::U8Npy(data);
}

// The data of a .npy file: what follows its header.
std::string NpyData(const std::string& path) {
  std::string file = test::ReadFile(path);
  if (file.size() < 10) return "";
  size_t header =
      10 + (static_cast<unsigned char>(file[8]) | static_cast<unsigned char>(file[9]) << 8);
  return file.size() < header ? "" : file.substr(header);
}

class Fill : public Lifecycle {
 protected:
  std::string Path(const std::string& file) const { return dir_.path() + "/" + file; }
  // The events the stream holds about tensor `name`, as "event" words in order.
  std::vector<std::string> EventsOf(const std::string& name) {
    auto reply = redis_.Connect()->Command({"XRANGE", keys_.Events(), "-", "+"});
    std::vector<std::string> out;
    for (const RedisValue& entry : reply->elements) {
      const auto& fields = entry.elements[1].elements;
      std::map<std::string, std::string> f;
      for (size_t i = 0; i + 1 < fields.size(); i += 2) f[fields[i].str] = fields[i + 1].str;
      if (f["name"] == name) out.push_back(f["event"]);
    }
    return out;
  }
  // A raw create of u8[n] in host memory with "fill", for process `filler`.
  json CreateFilled(const std::string& name, size_t n, pid_t filler) {
    std::string req = "fill-" + name;
    return Raw(R"({"op":"create","name":")" + name + R"(","dtype":"u8","shape":[)" +
                   std::to_string(n) + R"(],"device":"cpu","fill":true,"pid":)" +
                   std::to_string(filler) + R"(,"req":")" + req + R"("})",
               req);
  }
  json Publish(const std::string& name, pid_t pid, const std::string& req) {
    return Raw(R"({"op":"publish","name":")" + name + R"(","pid":)" + std::to_string(pid) +
                   R"(,"req":")" + req + R"("})",
               req);
  }
  // Writes `data` into host tensor `name` through its shm object, as its filler would.
  void WriteShm(const std::string& name, const std::string& data) {
    std::string shm = HashField(name, "ipc_handle");
    int fd = shm_open(shm.c_str(), O_RDWR, 0);
    ASSERT_GE(fd, 0) << shm << ": " << std::strerror(errno);
    void* p = mmap(nullptr, data.size(), PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ASSERT_NE(p, MAP_FAILED);
    std::memcpy(p, data.data(), data.size());
    munmap(p, data.size());
  }
  std::unique_ptr<test::Background> Sleeper(const std::string& log) {
    return std::make_unique<test::Background>(std::vector<std::string>{"/bin/sleep", "600"},
                                              std::map<std::string, std::string>{}, Path(log));
  }
};

// The README's pipeline: a consumer started before its producer gets the file's bytes, every one
// of them, each time (a 16 MiB file, so that the copy takes a while after the create).
TEST_F(Fill, AConsumerStartedBeforeItsProducerGetsTheFilesBytes) {
  for (int run = 0; run < 10; ++run) {
    std::string name = "batch." + std::to_string(run);
    std::string data = RandomBytes(16 << 20, 1000 + run);
    WriteNpy(Path(name + ".npy"), data);
    auto consumer =
        Start("mcd-get", {name, "--wait", "60", "--no-ref", "-q", "-o", Path(name + ".out.npy")},
              name + ".get.log");
    // The consumer waits on the event stream before the producer starts.
    ASSERT_TRUE(test::WaitFor([&] { return BlockedReaders(1); }, 20000));
    auto created =
        Tool("mcd-create", {name, "--from", Path(name + ".npy"), "--device", "cpu", "-q"});
    ASSERT_EQ(created.exit_code, 0) << created.err;
    ASSERT_EQ(consumer->Wait(60), 0) << test::ReadFile(Path(name + ".get.log"));
    std::string got = NpyData(Path(name + ".out.npy"));
    ASSERT_EQ(got.size(), data.size()) << "run " << run;
    ASSERT_TRUE(got == data) << "run " << run << ": the consumer read other bytes than the file's";
    EXPECT_EQ(HashField(name, "state"), "ready");
    EXPECT_EQ(EventsOf(name), std::vector<std::string>{"create"}) << "one event, once it is ready";
  }
}

// Files loaded one after another, of one size, land in objects the server's host ready stock
// made ahead with their pages (alloc/host_stock.cpp), and each holds its own file's bytes, none
// of a tensor before it.
TEST_F(Fill, FilesLoadedOneAfterAnotherLandInObjectsMadeAheadAndHoldTheirBytes) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  ready_max_ = "25%";  // the default
  ASSERT_NO_FATAL_FAILURE(StartServer());
  constexpr size_t kBytes = 4 << 20;
  constexpr int kFiles = 4;
  for (int run = 0; run < kFiles; ++run) {
    WriteNpy(Path("load." + std::to_string(run) + ".npy"), RandomBytes(kBytes, 2000 + run));
  }
  std::vector<std::string> live;  // the objects of the tensors made so far
  // The objects in /dev/shm of this server, tensors' and stock's alike.
  auto objects = [&] {
    const std::string& any = live.front();
    size_t seq = any.rfind('-', any.rfind('-') - 1);  // "<prefix><seq>-<random>"
    std::vector<std::string> out;
    for (const std::string& file : test::ShmObjects(any.substr(1, seq))) out.push_back("/" + file);
    return out;
  };
  // The creates come one right after another (the stock keeps a size for 2 s after its last
  // create); the bytes are read back once all are made.
  for (int run = 0; run < kFiles; ++run) {
    std::string name = "load." + std::to_string(run);
    std::vector<std::string> before;
    if (run > 0) {
      // The stock has made an object beyond the tensors' own.
      ASSERT_TRUE(test::WaitFor([&] { return objects().size() > live.size(); }, 30000));
      before = objects();
    }
    auto created =
        Tool("mcd-create", {name, "--from", Path(name + ".npy"), "--device", "cpu", "-q"});
    ASSERT_EQ(created.exit_code, 0) << created.err;
    live.push_back(HashField(name, "ipc_handle"));
    if (run > 0) {
      EXPECT_NE(std::find(before.begin(), before.end(), live.back()), before.end())
          << "run " << run << ": " << live.back() << " was not made ahead";
    }
  }
  for (int run = 0; run < kFiles; ++run) {
    std::string name = "load." + std::to_string(run);
    ASSERT_EQ(Tool("mcd-get", {name, "--no-ref", "-q", "-o", Path(name + ".out.npy")}).exit_code,
              0);
    EXPECT_TRUE(NpyData(Path(name + ".out.npy")) == RandomBytes(kBytes, 2000 + run))
        << "run " << run;
    ASSERT_EQ(Tool("mcd-rm", {name, "-q"}).exit_code, 0);
  }
}

// The library: a tensor created with contents holds exactly them, with one reference, and a
// reader in another process (mcd-get -o) reads the same bytes.
TEST_F(Fill, ALibraryCreateWithContentsHoldsThem) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  std::string data = RandomBytes(1 << 20, 7);
  CreateSpec spec = HostSpec("lib");
  spec.shape = {1 << 20};
  spec.contents = data.data();
  spec.contents_bytes = data.size();
  auto created = client->Create(spec);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ(created->state, "ready");
  EXPECT_EQ(created->refcount, 1);
  EXPECT_EQ(HashField("lib", "refcount"), "1");
  auto read = Tool("mcd-get", {"lib", "--no-ref", "-q", "-o", Path("lib.npy")});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_TRUE(NpyData(Path("lib.npy")) == data);

  // Contents of the wrong size are refused before anything is made.
  spec.name = "short";
  spec.contents_bytes = data.size() - 1;
  auto refused = client->Create(spec);
  EXPECT_EQ(refused.status().code(), ErrorCode::kInvalidArgument) << refused.status().ToString();
  EXPECT_EQ(HashField("short", "state"), "");
  EXPECT_EQ(ShmCount(), 1u);
}

// NumPy has no bfloat16: a bf16 tensor's .npy holds its raw bits as uint16, which the tool
// notes on stderr unless -q asks for nothing on success.
TEST_F(Fill, ABf16NpyHoldsTheRawBitsWithANoteThatQuietLeavesOut) {
  auto client = ConnectClient();
  ASSERT_NE(client, nullptr);
  std::string data = RandomBytes(2 * 64, 8);
  CreateSpec spec = HostSpec("half");
  spec.dtype = DType::kBF16;
  spec.shape = {64};
  spec.contents = data.data();
  spec.contents_bytes = data.size();
  ASSERT_TRUE(client->Create(spec).ok());
  auto noted = Tool("mcd-get", {"half", "--no-ref", "-o", Path("noted.npy")});
  ASSERT_EQ(noted.exit_code, 0) << noted.err;
  EXPECT_NE(noted.err.find("NumPy has no bfloat16"), std::string::npos) << noted.err;
  EXPECT_TRUE(NpyData(Path("noted.npy")) == data);
  auto quiet = Tool("mcd-get", {"half", "--no-ref", "-q", "-o", Path("quiet.npy")});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, "");
  EXPECT_TRUE(NpyData(Path("quiet.npy")) == data);
}

// While its filler writes, a tensor is "creating": gets and removals answer not_ready (75), a
// wait goes on waiting, mcd-ls shows it, no event names it, and only its filler may publish it.
TEST_F(Fill, ATensorBeingFilledIsNotReadyUntilItsFillerPublishesIt) {
  auto filler = Sleeper("filler.log");
  std::string data = RandomBytes(1 << 16, 42);
  json created = CreateFilled("f", data.size(), filler->pid());
  ASSERT_EQ(created["ok"], true) << created.dump();
  EXPECT_EQ(created["tensor"]["state"], "creating");
  EXPECT_EQ(HashField("f", "state"), "creating");
  auto waiting =
      Start("mcd-get", {"f", "--wait", "60", "--no-ref", "-q", "-o", Path("f.npy")}, "wait.log");
  EXPECT_EQ(Tool("mcd-get", {"f", "-q"}).exit_code, 75);
  EXPECT_EQ(Tool("mcd-get", {"f", "-q", "--no-ref"}).exit_code, 75);
  auto rm = Tool("mcd-rm", {"f"});
  EXPECT_EQ(rm.exit_code, 75) << rm.err;
  EXPECT_NE(rm.err.find("creating"), std::string::npos) << rm.err;
  auto ls = Tool("mcd-ls", {"f"});
  EXPECT_NE(ls.out.find("creating"), std::string::npos) << ls.out;
  EXPECT_EQ(HashField("f", "refcount"), "1");
  EXPECT_TRUE(EventsOf("f").empty());

  WriteShm("f", data);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(test::Running(waiting->pid())) << "a wait goes on while the tensor is being filled";
  json stranger = Publish("f", getpid(), "pub-stranger");
  EXPECT_EQ(stranger["ok"], false) << stranger.dump();
  EXPECT_EQ(stranger["error"]["code"], "invalid_argument");
  EXPECT_EQ(HashField("f", "state"), "creating");

  json published = Publish("f", filler->pid(), "pub-filler");
  ASSERT_EQ(published["ok"], true) << published.dump() << ServeLog();
  EXPECT_EQ(published["tensor"]["state"], "ready");
  EXPECT_EQ(published["tensor"]["refcount"], 1);
  EXPECT_EQ(HashField("f", "state"), "ready");
  ASSERT_EQ(waiting->Wait(30), 0) << test::ReadFile(Path("wait.log"));
  EXPECT_TRUE(NpyData(Path("f.npy")) == data);
  EXPECT_EQ(EventsOf("f"), std::vector<std::string>{"create"});
  json again = Publish("f", filler->pid(), "pub-again");
  EXPECT_EQ(again["ok"], false) << "a ready tensor is not published twice: " << again.dump();
  EXPECT_EQ(Tool("mcd-rm", {"f"}).exit_code, 0);
  EXPECT_TRUE(ShmFreedSoon());
}

// A filler that dies before it publishes leaves nothing: no hash, no memory, no event.
TEST_F(Fill, AFillerThatDiesMidFillLeavesNothing) {
  auto filler = Sleeper("filler.log");
  ASSERT_EQ(CreateFilled("dies", 4096, filler->pid())["ok"], true);
  ASSERT_EQ(ShmCount(), 1u);
  filler->Stop(SIGKILL);
  EXPECT_TRUE(
      test::WaitFor([&] { return HashField("dies", "state").empty() && ShmCount() == 0; }, 5000))
      << "state '" << HashField("dies", "state") << "', " << ShmCount() << " shm object(s)\n"
      << ServeLog();
  EXPECT_TRUE(EventsOf("dies").empty());
  EXPECT_EQ(Tool("mcd-get", {"dies", "-q"}).exit_code, 1);
  // The name is free again.
  EXPECT_EQ(Tool("mcd-create", {"dies", "--dtype", "u8", "--shape", "8", "--device", "cpu", "-q"})
                .exit_code,
            0);
}

// A process that held a reference of an earlier tensor of the name, and gave it back, dies
// while a new tensor of the name is being filled: the new one is no reference of it, and the
// give-back of the dead holder's references leaves it alone (it used to take it for another
// server's hash, keep its memory until shutdown and refuse its publish for good).
TEST_F(Fill, ADeadHolderOfAnEarlierTensorLeavesOneBeingFilledAlone) {
  auto holder = Sleeper("holder.log");
  const std::string pid = std::to_string(holder->pid());
  ASSERT_EQ(Tool("mcd-create", {"again", "--dtype", "u8", "--shape", "64", "--device", "cpu", "-q"})
                .exit_code,
            0);
  ASSERT_EQ(Tool("mcd-get", {"again", "--owner-pid", pid, "-q"}).exit_code, 0);
  ASSERT_EQ(Tool("mcd-rm", {"again", "--owner-pid", pid, "-q"}).exit_code, 0);
  ASSERT_EQ(Tool("mcd-rm", {"again", "-q"}).exit_code, 0);  // the creator's: freed
  ASSERT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 5000));
  ASSERT_EQ(CreateFilled("again", 4096, getpid())["ok"], true);
  std::string data = RandomBytes(4096, 77);
  WriteShm("again", data);
  // The reaper gives the dead holder's references back and forgets it.
  auto holds = [&] {
    auto members = redis_.Connect()->Command({"SMEMBERS", keys_.Holders(node_)});
    for (const RedisValue& id : members->elements) {
      if (id.str.rfind(pid + ":", 0) == 0) return true;
    }
    return false;
  };
  ASSERT_TRUE(holds()) << "the holder is known while it lives";
  holder->Stop(SIGKILL);
  EXPECT_TRUE(test::WaitFor([&] { return !holds(); }, 10000)) << ServeLog();
  EXPECT_EQ(ServeLog().find("not this server's any more"), std::string::npos) << ServeLog();
  EXPECT_EQ(Publish("again", getpid(), "pub-again")["ok"], true) << ServeLog();
  auto got = Tool("mcd-get", {"again", "--no-ref", "-q", "-o", Path("again.npy")});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_TRUE(NpyData(Path("again.npy")) == data) << "the filler's bytes, every one";
}

// A filler that gives up abandons its tensor: nothing is left. Only its filler may abandon it,
// and a delete, its filler's too, is not_ready like any other while it is being filled.
TEST_F(Fill, AFillerThatGivesUpLeavesNothing) {
  auto filler = Sleeper("filler.log");
  ASSERT_EQ(CreateFilled("quit", 4096, filler->pid())["ok"], true);
  std::string pid = std::to_string(filler->pid());
  json deleted =
      Raw(R"({"op":"delete","name":"quit","pid":)" + pid + R"(,"req":"quit-del"})", "quit-del");
  EXPECT_EQ(deleted["error"]["code"], "not_ready") << deleted.dump();
  json stranger = Raw(R"({"op":"abandon","name":"quit","pid":)" + std::to_string(getpid()) +
                          R"(,"req":"quit-other"})",
                      "quit-other");
  EXPECT_EQ(stranger["error"]["code"], "invalid_argument") << stranger.dump();
  EXPECT_EQ(HashField("quit", "state"), "creating");
  json abandoned =
      Raw(R"({"op":"abandon","name":"quit","pid":)" + pid + R"(,"req":"quit-ab"})", "quit-ab");
  ASSERT_EQ(abandoned["ok"], true) << abandoned.dump();
  EXPECT_EQ(abandoned["freed"], true);
  EXPECT_EQ(HashField("quit", "state"), "");
  EXPECT_TRUE(ShmFreedSoon());
  EXPECT_TRUE(EventsOf("quit").empty());
}

// A create with "fill" needs a filler on this host, and excludes copy_of.
TEST_F(Fill, ACreateWithFillNamesALiveFiller) {
  json no_pid = Raw(
      R"({"op":"create","name":"x","dtype":"u8","shape":[8],"device":"cpu","fill":true,"req":"np"})",
      "np");
  EXPECT_EQ(no_pid["error"]["code"], "invalid_argument") << no_pid.dump();
  json dead = CreateFilled("x", 8, 0x3ffffff0);
  EXPECT_EQ(dead["error"]["code"], "invalid_argument") << dead.dump();
  std::string self = std::to_string(getpid());
  json copy = Raw(
      R"({"op":"create","name":"x","dtype":"u8","shape":[8],"device":"cpu","fill":true,"pid":)" +
          self + R"(,"copy_of":"y","req":"cp"})",
      "cp");
  EXPECT_EQ(copy["error"]["code"], "invalid_argument") << copy.dump();
  EXPECT_NE(copy["error"]["message"].get<std::string>().find("exclude"), std::string::npos)
      << copy.dump();
  // A filler whose pid means another process where the server runs (another PID namespace).
  json elsewhere = Raw(
      R"({"op":"create","name":"x","dtype":"u8","shape":[8],"device":"cpu","fill":true,"pid":)" +
          self + R"(,"pid_space":"another-boot/4026531836","req":"ns"})",
      "ns");
  EXPECT_EQ(elsewhere["error"]["code"], "invalid_argument") << elsewhere.dump();
  EXPECT_NE(elsewhere["error"]["message"].get<std::string>().find("PID namespace"),
            std::string::npos)
      << elsewhere.dump();
  EXPECT_TRUE(TensorKeys().empty());
  EXPECT_EQ(ShmCount(), 0u);
}

}  // namespace
}  // namespace mcd
