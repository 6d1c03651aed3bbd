// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// safetensors in and out of tensor sets: mcd-create NAME --from FILE.safetensors makes a set of
// the file's tensors, mcd-get NAME/ -o FILE.safetensors writes one back; a file memcuda cannot
// hold is refused with nothing made. Real redis-server, mcd-serve and tools, host tensors; the
// files are written and read here by hand (not by the code under test), every byte compared.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "lifecycle_fixture.h"
#include "test_support.h"

namespace mcd {
namespace {

using test::RandomBytes;

struct FileTensor {
  std::string name, dtype;  // the format's dtype name
  std::vector<int64_t> shape;
  std::string bytes;
};

// A safetensors file of `tensors`, their data back to back in the order given (unaligned after
// a tensor of an odd size), with a __metadata__ entry. `gap` bytes before each tensor's data and
// `trailer` after the last make a file the format does not allow.
std::string SafetensorsFile(const std::vector<FileTensor>& tensors, size_t gap = 0,
                            const std::string& trailer = "",
                            const json& metadata = {{"format", "pt"}}) {
  json header = {{"__metadata__", metadata}};
  std::string data;
  for (const FileTensor& t : tensors) {
    data.append(gap, 'x');
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string text = header.dump();
  std::string size(8, '\0');
  for (int i = 0; i < 8; ++i) size[i] = static_cast<char>(text.size() >> (8 * i));
  return size + text + data + trailer;
}

// The tensors of a safetensors file, by name, as read here.
std::map<std::string, FileTensor> ReadSafetensors(const std::string& file) {
  std::map<std::string, FileTensor> out;
  if (file.size() < 8) return out;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[i]);
  json header = json::parse(file.substr(8, n));
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    out[name] = FileTensor{name, t["dtype"], t["shape"].get<std::vector<int64_t>>(),
                           file.substr(8 + n + begin, end - begin)};
  }
  return out;
}

class Safetensors : public Lifecycle {
 protected:
  std::string Path(const std::string& file) const { return dir_.path() + "/" + file; }
  void Write(const std::string& file, const std::string& bytes) {
    std::ofstream(Path(file), std::ios::binary) << bytes;
  }
  static std::vector<FileTensor> Model() {
    return {{"model.embed_tokens.weight", "F16", {64, 16}, RandomBytes(64 * 16 * 2, 1)},
            {"model.layers.0.self_attn.q_proj.weight", "BF16", {16, 16}, RandomBytes(512, 2)},
            {"model.layers.0.mlp.gate_proj.bias", "F32", {48}, RandomBytes(48 * 4, 3)},
            {"model.norm.eps", "F64", {}, RandomBytes(8, 4)},
            {"lm_head.mask", "BOOL", {5, 3}, std::string(15, '\1')},
            {"pos.ids", "I64", {2, 2, 3}, RandomBytes(96, 5)},
            {"q.scales", "U8", {7}, RandomBytes(7, 6)}};
  }
};

// A checkpoint of mixed dtypes (a scalar among them, offsets unaligned) becomes a set whose
// members hold the file's bytes; the set written back holds the same tensors, bytes and shapes.
TEST_F(Safetensors, ACheckpointBecomesASetAndComesBackTheSame) {
  std::vector<FileTensor> model = Model();
  Write("model.safetensors", SafetensorsFile(model));
  auto made = Tool("mcd-create", {"llm", "--from", Path("model.safetensors"), "--device", "cpu"});
  ASSERT_EQ(made.exit_code, 0) << made.err << ServeLog();
  EXPECT_NE(made.out.find("7 tensors"), std::string::npos) << made.out;
  EXPECT_EQ(ShmCount(), 1u) << "one allocation for the whole checkpoint";
  // The set named as a tensor: what to name instead, whether the tool looks, waits or lists.
  const std::string hint = "'llm' is a tensor set of 7 members: name it 'llm/'";
  for (const char* tool : {"mcd-get", "mcd-rm"}) {
    auto plain = Tool(tool, {"llm"});
    EXPECT_EQ(plain.exit_code, 1) << tool;
    EXPECT_NE(plain.err.find(hint), std::string::npos) << plain.err;
  }
  auto waited = Tool("mcd-get", {"llm", "--wait", "0.2"});
  EXPECT_EQ(waited.exit_code, 75);
  EXPECT_NE(waited.err.find(hint), std::string::npos) << waited.err;
  auto listed = Tool("mcd-ls", {"llm"});
  EXPECT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.err.find(hint), std::string::npos) << listed.err;
  EXPECT_EQ(Tool("mcd-ls", {"ll*"}).err.find(hint), std::string::npos) << "a pattern: no note";
  for (const FileTensor& t : model) {
    std::string name = "llm/" + t.name;
    EXPECT_EQ(HashField(name, "set"), "llm");
    auto read = Tool("mcd-get", {name, "--no-ref", "-q", "-o", Path(t.name + ".bin")});
    ASSERT_EQ(read.exit_code, 0) << read.err;
    EXPECT_TRUE(test::ReadFile(Path(t.name + ".bin")) == t.bytes) << name;
  }
  EXPECT_EQ(HashField("llm/model.norm.eps", "shape"), "[1]") << "a scalar is shape [1]";
  EXPECT_EQ(HashField("llm/lm_head.mask", "dtype"), "bool");

  auto saved = Tool("mcd-get", {"llm/", "-o", Path("out.safetensors")});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  std::map<std::string, FileTensor> back = ReadSafetensors(test::ReadFile(Path("out.safetensors")));
  ASSERT_EQ(back.size(), model.size());
  for (const FileTensor& t : model) {
    const FileTensor& b = back[t.name];
    EXPECT_EQ(b.dtype, t.dtype) << t.name;
    EXPECT_EQ(b.shape, t.shape.empty() ? std::vector<int64_t>{1} : t.shape) << t.name;
    EXPECT_TRUE(b.bytes == t.bytes) << t.name;
  }
  for (const FileTensor& t : model) EXPECT_EQ(HashField("llm/" + t.name, "refcount"), "1");

  // Read without a reference: the counts shown are the tensors' own.
  auto peek = Tool("mcd-get", {"llm/", "--no-ref", "--json"});
  ASSERT_EQ(peek.exit_code, 0) << peek.err;
  for (const json& r : json::parse(peek.out)) EXPECT_EQ(r["refcount"], 1) << r.dump();
  EXPECT_EQ(HashField("llm/q.scales", "refcount"), "1");

  // The set's one reference, bound to no process, counted on its member first by name; then
  // every member's given back: the others go, and the allocation stays with the first.
  std::string leader = "llm/" + model.front().name;
  for (const FileTensor& t : model) leader = std::min(leader, "llm/" + t.name);
  auto got = Tool("mcd-get", {"llm/", "--detached", "--json"});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_EQ(json::parse(got.out).size(), model.size());
  for (const FileTensor& t : model) {
    const std::string name = "llm/" + t.name;
    EXPECT_EQ(HashField(name, "refcount"), name == leader ? "2" : "1") << name;
  }
  ASSERT_EQ(Tool("mcd-rm", {"llm/"}).exit_code, 0);
  EXPECT_EQ(HashField(leader, "refcount"), "1");
  EXPECT_EQ(HashField("llm/q.scales", "refcount"), "") << "freed with its only reference";
  EXPECT_EQ(ShmCount(), 1u) << "the set's reference keeps the allocation";
  auto removed = Tool("mcd-rm", {"llm/"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 5000)) << ServeLog();
  EXPECT_NE(Tool("mcd-rm", {"llm/"}).exit_code, 0) << "no such set any more";
}

// A consumer started before the set exists waits for it (--wait) and writes what the producer
// loaded, every byte, holding the set only while it writes; a wait that runs out changes nothing.
TEST_F(Safetensors, AConsumerWaitingForASetWritesEveryByteOfTheCheckpoint) {
  std::vector<FileTensor> model = Model();
  Write("model.safetensors", SafetensorsFile(model));
  auto consumer =
      Start("mcd-get", {"w/", "--wait", "60", "-q", "-o", Path("got.safetensors")}, "wait.log");
  ASSERT_TRUE(test::WaitFor([&] { return BlockedReaders(1); }, 20000));
  auto made =
      Tool("mcd-create", {"w", "--from", Path("model.safetensors"), "--device", "cpu", "-q"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(consumer->Wait(60), 0) << test::ReadFile(Path("wait.log"));
  std::map<std::string, FileTensor> got = ReadSafetensors(test::ReadFile(Path("got.safetensors")));
  ASSERT_EQ(got.size(), model.size());
  for (const FileTensor& t : model) {
    EXPECT_TRUE(got[t.name].bytes == t.bytes) << t.name;
    EXPECT_EQ(HashField("w/" + t.name, "refcount"), "1") << t.name;
  }
  auto late = Tool("mcd-get", {"never/", "--wait", "0.5", "-o", Path("never.safetensors")});
  EXPECT_EQ(late.exit_code, 75) << late.err;
  EXPECT_NE(late.err.find("tensor set 'never' was not there within 0.5 s"), std::string::npos)
      << late.err;
  EXPECT_FALSE(std::filesystem::exists(Path("never.safetensors")));
}

// A set written to a file goes as the tools' -o writes any file: through a link, keeping the
// permission bits of a file it replaces, leaving no temporary file; into a FIFO as it is.
TEST_F(Safetensors, ASetIsWrittenAsEveryOutputIs) {
  std::vector<FileTensor> model = Model();
  Write("model.safetensors", SafetensorsFile(model));
  ASSERT_EQ(
      Tool("mcd-create", {"llm", "--from", Path("model.safetensors"), "--device", "cpu"}).exit_code,
      0);
  auto plain = Tool("mcd-get", {"llm/", "--json", "-o", Path("plain.safetensors")});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(json::parse(plain.out).size(), model.size()) << "--json: the members written";
  const std::string expected = test::ReadFile(Path("plain.safetensors"));
  ASSERT_EQ(ReadSafetensors(expected).size(), model.size());
  auto listed = Tool("mcd-ls", {"llm/", "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out).size(), model.size()) << "mcd-ls SET/ lists its members";

  std::string out_dir = Path("out");
  ASSERT_EQ(mkdir(out_dir.c_str(), 0755), 0);
  std::string target = out_dir + "/real.safetensors", link = out_dir + "/link.safetensors";
  std::ofstream(target) << "old";
  ASSERT_EQ(chmod(target.c_str(), 0640), 0);
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  auto saved = Tool("mcd-get", {"llm/", "-q", "-o", link});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_TRUE(test::ReadFile(target) == expected) << "written through the link";
  struct stat st {};
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced by a plain file";
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir))
    names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"link.safetensors", "real.safetensors"}));

  std::string fifo = Path("pipe.safetensors");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  test::Background reader({"/bin/cat", fifo}, {}, Path("received"));
  // A file keeps no reference: a holder for one is refused, and nothing is written.
  auto held = Tool("mcd-get", {"llm/", "--detached", "-o", Path("held.safetensors")});
  EXPECT_EQ(held.exit_code, 64) << held.err;
  EXPECT_NE(held.err.find("keeps no reference"), std::string::npos) << held.err;
  EXPECT_FALSE(std::filesystem::exists(Path("held.safetensors")));
  auto piped = Tool("mcd-get", {"llm/", "-q", "-o", fifo});
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a plain file";
  ASSERT_EQ(reader.Wait(S_ISFIFO(st.st_mode) ? 30 : 1), 0) << "the reader got no end of file";
  EXPECT_TRUE(test::ReadFile(Path("received")) == expected);
  ASSERT_EQ(Tool("mcd-rm", {"llm/", "-q"}).exit_code, 0);
}

// A file memcuda cannot hold is refused, naming why, and nothing is made.
TEST_F(Safetensors, AFileMemcudaCannotHoldMakesNothing) {
  std::vector<FileTensor> model = Model();
  model.push_back({"fp8.weight", "F8_E4M3", {4}, RandomBytes(4, 9)});
  Write("fp8.safetensors", SafetensorsFile(model));
  auto refused = Tool("mcd-create", {"a", "--from", Path("fp8.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("F8_E4M3"), std::string::npos) << refused.err;

  std::string whole = SafetensorsFile(Model());
  Write("cut.safetensors", whole.substr(0, whole.size() - 10));
  refused = Tool("mcd-create", {"b", "--from", Path("cut.safetensors"), "--device", "cpu"});
  EXPECT_EQ(refused.exit_code, 74) << refused.err;  // cut short, as a .npy file's
  EXPECT_NE(refused.err.find("outside the file's"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("truncated"), std::string::npos) << refused.err;
  Write("stub.safetensors", whole.substr(0, 5));
  refused = Tool("mcd-create", {"b", "--from", Path("stub.safetensors"), "--device", "cpu"});
  EXPECT_EQ(refused.exit_code, 74) << refused.err;
  EXPECT_NE(refused.err.find(Path("stub.safetensors") + ": "), std::string::npos) << refused.err;

  std::string huge = whole;
  huge[7] = '\x7f';  // a header size past the format's limit
  Write("huge.safetensors", huge);
  refused = Tool("mcd-create", {"c", "--from", Path("huge.safetensors"), "--device", "cpu"});
  EXPECT_EQ(refused.exit_code, 64) << refused.err;
  EXPECT_NE(refused.err.find("limit"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find(Path("huge.safetensors") + ": "), std::string::npos) << refused.err;
  huge = whole;
  huge[2] = '\x7f';  // within the limit, past the file
  Write("past.safetensors", huge);
  refused = Tool("mcd-create", {"c", "--from", Path("past.safetensors"), "--device", "cpu"});
  EXPECT_EQ(refused.exit_code, 74) << refused.err;
  EXPECT_NE(refused.err.find("more than the file's"), std::string::npos) << refused.err;

  std::vector<FileTensor> empty = {{"e", "F32", {0, 4}, ""}};
  Write("empty.safetensors", SafetensorsFile(empty));
  refused = Tool("mcd-create", {"d", "--from", Path("empty.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("at least one element"), std::string::npos) << refused.err;

  // The format indexes every byte of the data: no holes, nothing after the last tensor, and
  // __metadata__ holds strings.
  Write("holes.safetensors", SafetensorsFile(Model(), 3));
  refused = Tool("mcd-create", {"h", "--from", Path("holes.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("belong to no tensor"), std::string::npos) << refused.err;
  Write("trailer.safetensors", SafetensorsFile(Model(), 0, "more"));
  refused = Tool("mcd-create", {"t", "--from", Path("trailer.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("4 bytes after the last tensor"), std::string::npos) << refused.err;
  Write("meta.safetensors", SafetensorsFile(Model(), 0, "", {{"step", 1000}}));
  refused = Tool("mcd-create", {"m", "--from", Path("meta.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("\"step\" is not a string"), std::string::npos) << refused.err;
  Write("meta2.safetensors", SafetensorsFile(Model(), 0, "", json::array({"pt"})));
  refused = Tool("mcd-create", {"m2", "--from", Path("meta2.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("\"__metadata__\" is not an object"), std::string::npos)
      << refused.err;
  // A hole between two tensors, and two tensors over the same bytes.
  // `file` with `tensor`'s data_offsets [begin, end), or [begin, begin + its length).
  auto offsets_of = [&](const std::string& file, const std::string& tensor, uint64_t begin,
                        std::optional<uint64_t> end = std::nullopt) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(file[i]);
    json header = json::parse(file.substr(8, n));
    uint64_t length = header[tensor]["data_offsets"][1].get<uint64_t>() -
                      header[tensor]["data_offsets"][0].get<uint64_t>();
    header[tensor]["data_offsets"] = {begin, end.value_or(begin + length)};
    std::string text = header.dump();
    std::string size(8, '\0');
    for (int i = 0; i < 8; ++i) size[i] = static_cast<char>(text.size() >> (8 * i));
    return size + text + file.substr(8 + n);
  };
  std::vector<FileTensor> two = {{"a", "U8", {8}, RandomBytes(8, 10)},
                                 {"b", "U8", {8}, RandomBytes(8, 11)}};
  Write("between.safetensors", offsets_of(SafetensorsFile(two, 0, "xxxx"), "b", 12));
  refused = Tool("mcd-create", {"g", "--from", Path("between.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("bytes [8, 12) of the data belong to no tensor (before 'b')"),
            std::string::npos)
      << refused.err;
  Write("overlap.safetensors", offsets_of(SafetensorsFile(two), "b", 4));
  refused = Tool("mcd-create", {"o", "--from", Path("overlap.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("the data of 'a' and 'b' overlap"), std::string::npos) << refused.err;
  Write("reversed.safetensors", offsets_of(SafetensorsFile(two), "b", 16, 8));
  refused = Tool("mcd-create", {"r", "--from", Path("reversed.safetensors"), "--device", "cpu"});
  EXPECT_EQ(refused.exit_code, 64) << refused.err;
  EXPECT_NE(refused.err.find("[16, 8) of tensor 'b' end before they begin"), std::string::npos)
      << refused.err;
  std::vector<FileTensor> deep = {{"d", "U8", std::vector<int64_t>(9, 1), RandomBytes(1, 12)}};
  Write("deep.safetensors", SafetensorsFile(deep));
  refused = Tool("mcd-create", {"d9", "--from", Path("deep.safetensors"), "--device", "cpu"});
  EXPECT_EQ(refused.exit_code, 64) << refused.err;
  EXPECT_NE(refused.err.find("9 dimensions; the limit is 8"), std::string::npos) << refused.err;
  EXPECT_EQ(refused.err.find("at least one element"), std::string::npos) << refused.err;
  // A null __metadata__ is none, as the format's own reader takes it.
  Write("null.safetensors", SafetensorsFile(two, 0, "", nullptr));
  auto taken = Tool("mcd-create", {"n", "--from", Path("null.safetensors"), "--device", "cpu"});
  EXPECT_EQ(taken.exit_code, 0) << taken.err;
  ASSERT_EQ(Tool("mcd-rm", {"n/", "-q"}).exit_code, 0);
  EXPECT_TRUE(test::WaitFor([&] { return ShmCount() == 0; }, 5000));

  Write("junk.safetensors", std::string("\x05\0\0\0\0\0\0\0{nope", 13));
  refused = Tool("mcd-create", {"e", "--from", Path("junk.safetensors"), "--device", "cpu"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_EQ(ShmCount(), 0u) << "nothing made";
  EXPECT_TRUE(Tool("mcd-ls", {"-q"}).out.empty()) << "no tensor";
}

}  // namespace
}  // namespace mcd
