// The protocol's JSON reader must accept exactly what a conforming parser accepts, and read the
// same values: it is held to nlohmann's parser on hand-picked documents and on many mutations
// of them.
#include "protocol/json_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

namespace mcd {
namespace {

using nlohmann::json;

json ToJson(const JsonReader& doc, uint32_t index) {
  const JsonReader::Node& node = doc.at(index);
  switch (node.kind) {
    case JsonReader::Kind::kNull: return nullptr;
    case JsonReader::Kind::kBool: return node.boolean;
    case JsonReader::Kind::kInt: return node.int_value;
    case JsonReader::Kind::kUint: return node.uint_value;
    case JsonReader::Kind::kFloat: return std::strtod(std::string(node.text).c_str(), nullptr);
    case JsonReader::Kind::kString: return std::string(node.text);
    case JsonReader::Kind::kArray: {
      json out = json::array();
      doc.ForEachElement(index, [&](uint32_t element) { out.push_back(ToJson(doc, element)); });
      return out;
    }
    case JsonReader::Kind::kObject: {
      json out = json::object();
      doc.ForEachMember(index, [&](std::string_view key, uint32_t value) {
        out[std::string(key)] = ToJson(doc, value);  // the last of repeated keys, as nlohmann
      });
      return out;
    }
  }
  return nullptr;
}

// Both accept or both refuse; when they accept, they read the same value.
void ExpectSameAsNlohmann(const std::string& text) {
  json expected = json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto parsed = JsonReader::Parse(text, 64, "document");
  ASSERT_EQ(parsed.ok(), !expected.is_discarded())
      << "text: " << json(text).dump(-1, ' ', true, json::error_handler_t::replace) << " reader: "
      << parsed.status().ToString();
  if (!parsed.ok()) {
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("document is not valid JSON"), std::string::npos);
    return;
  }
  EXPECT_EQ(ToJson(parsed.value(), parsed->root_index()), expected) << text;
}

const std::vector<std::string>& Valid() {
  static const std::vector<std::string> docs = {
      "{}", "[]", " \t\r\n{} \n", "0", "-0", "\"\"", "true", "false", "null",
      R"({"a" : [1, -2, 3.5e-3, true, false, null, {}, []], "b": {"c": "d"}})",
      R"("\"\\\/\b\f\n\r\t\u00e9\u00E9\ud83d\ude00\u0000x")",
      "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf \xf4\x8f\xbf\xbf\"",
      "[1E5, 1e+5, -1.0e-5, 0.5, 10, 123e-2]",
      "[9223372036854775807, 9223372036854775808, 18446744073709551615, 18446744073709551616]",
      "[-9223372036854775808, -9223372036854775809, 123456789012345678901234567890]",
      R"({"op":"create","name":"bench.1.life.17","dtype":"u8","shape":[1048576],"device":0,"pid":42,"node":"n1","req":"n1-42-ab-17"})",
      R"({"ok":true,"req":"n1-42-ab-17","op":"create","tensor":{"bytes":1048576,"creator_pid":4242,"ctime":1763800000000,"device":0,"dtype":"u8","ipc_handle_hex":"0a0b","ipc_kind":"cuda_mempool","lifetime":"heap","name":"x","node":"h\u00e9 \"q\"","offset":0,"owner":"0123456789abcdef","refcount":1,"shape":[2,3],"state":"ready"}})",
      R"({"ok":false,"req":"r","error":{"code":"not_found","message":"tensor 'x' does not exist"}})",
      R"({"a":1,"a":2})",
  };
  return docs;
}

TEST(JsonReader, ReadsWhatAConformingParserReads) {
  for (const std::string& text : Valid()) ExpectSameAsNlohmann(text);
}

TEST(JsonReader, RefusesWhatAConformingParserRefuses) {
  const std::vector<std::string> bad = {
      "", " ", "{", "}", "[", "]", R"({"a"})", R"({"a":})", R"({"a":1,})", "[1,]", "[,1]",
      "[01]", "[1.]", "[.5]", "[-]", "[1e]", "[1e+]", "[+1]", "[1 2]", R"({"a" 1})", "{1:2}",
      R"("\x")", R"("\u12")", R"("\u12G4")", R"("\ud800")", R"("\udc00")", R"("\ud800\u0041")",
      R"("\ud800x")", "\"a\x01b\"", "\"a\nb\"", "\"abc", "\"\\", "tru", "nul", "falsey", "[1] x",
      R"({"a":1}})", "'a'", "NaN", "Infinity", "-Infinity", "[1,2", "\"\xff\"", "\"\xc0\x80\"",
      "\"\xc1\xbf\"", "\"\xed\xa0\x80\"", "\"\xe2\x82\"", "\"\xf4\x90\x80\x80\"", "\"\xf5\x80\x80\x80\"",
      "\"\x80\"", "\"\xe0\x80\xaf\"", "\"\xf0\x80\x80\xaf\"",
  };
  for (const std::string& text : bad) ExpectSameAsNlohmann(text);
}

TEST(JsonReader, AgreesWithAConformingParserOnMutatedDocuments) {
  std::mt19937 rng(20261122);
  const std::string alphabet = "{}[]\":,\\/ -+.0123456789eEtfnulbrsa\x01\x7f\x80\xbf\xc3\xe2\xed\xf0\xff";
  int accepted = 0;
  int refused = 0;
  for (const std::string& base : Valid()) {
    for (int round = 0; round < 1500; ++round) {
      std::string text = base;
      int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        size_t at = rng() % text.size();
        char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0: text[at] = c; break;
          case 1: text.erase(at, 1); break;
          default: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        }
      }
      ExpectSameAsNlohmann(text);
      if (HasFailure()) return;
      (json::accept(text) ? accepted : refused)++;
    }
  }
  // The mutations must exercise both outcomes, or the comparison proves little.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(JsonReader, BoundsNesting) {
  EXPECT_TRUE(JsonReader::Parse(R"({"a":[[1]]})", 3, "command").ok());
  auto deep = JsonReader::Parse(R"({"a":[[[1]]]})", 3, "command");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "command nests deeper than 3 levels");
  // Deep nesting is refused before the parser recurses into it, however deep it goes.
  auto very_deep = JsonReader::Parse(std::string(100000, '['), 4, "command");
  ASSERT_FALSE(very_deep.ok());
  EXPECT_NE(very_deep.status().message().find("nests deeper"), std::string::npos);
  EXPECT_TRUE(JsonReader::Parse("[]", 1, "x").ok());
  EXPECT_FALSE(JsonReader::Parse("[]", 0, "x").ok());
}

TEST(JsonReader, NotesTheFirstRepeatedKeyInAnyObject) {
  auto doc = JsonReader::Parse(R"({"a":1,"b":{"c":1,"c":2},"a":3})", 4, "x");
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc->duplicate_key(), "c");
  // Keys compare decoded: "\u0061" is "a".
  auto escaped = JsonReader::Parse(R"({"a":1,"\u0061":2})", 4, "x");
  ASSERT_TRUE(escaped.ok());
  EXPECT_EQ(escaped->duplicate_key(), "a");
  auto none = JsonReader::Parse(R"({"a":1,"b":{"a":2}})", 4, "x");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->duplicate_key(), "");
}

TEST(JsonReader, FindsMembersAndKeepsIntegersExact) {
  auto doc = JsonReader::Parse(
      R"({"big":18446744073709551615,"min":-9223372036854775808,"f":2.0,"s":"t\u00e9","o":{"k":[3,4]}})",
      4, "x");
  ASSERT_TRUE(doc.ok());
  const JsonReader& d = doc.value();
  auto big = d.Find(d.root_index(), "big");
  ASSERT_TRUE(big);
  EXPECT_EQ(d.at(*big).kind, JsonReader::Kind::kUint);
  EXPECT_EQ(d.at(*big).uint_value, UINT64_MAX);
  auto min = d.Find(d.root_index(), "min");
  ASSERT_TRUE(min);
  EXPECT_EQ(d.at(*min).kind, JsonReader::Kind::kInt);
  EXPECT_EQ(d.at(*min).int_value, INT64_MIN);
  EXPECT_EQ(d.at(*d.Find(d.root_index(), "f")).kind, JsonReader::Kind::kFloat);
  EXPECT_EQ(d.at(*d.Find(d.root_index(), "s")).text, "t\xc3\xa9");
  auto o = d.Find(d.root_index(), "o");
  ASSERT_TRUE(o);
  auto k = d.Find(*o, "k");
  ASSERT_TRUE(k);
  EXPECT_EQ(d.at(*k).count, 2u);
  EXPECT_FALSE(d.Find(d.root_index(), "k"));  // members of nested objects are not the root's
  EXPECT_FALSE(d.Find(*k, "k"));              // an array has no members
  // Views into decoded strings survive moving the reader.
  JsonReader moved = std::move(doc).value();
  EXPECT_EQ(moved.at(*moved.Find(moved.root_index(), "s")).text, "t\xc3\xa9");
}

}  // namespace
}  // namespace mcd
