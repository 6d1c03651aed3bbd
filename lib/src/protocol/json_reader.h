// A strict reader for the protocol's small JSON documents: the commands on the queue and the
// server's replies, which sit on every create's and delete's path twice (the server reads the
// command, the client reads the reply).
//
// Why not nlohmann here: building its DOM costs ~4 us for a create command and ~8 us for a
// create's reply on the build machine (its lexer alone ~1.5 and ~4.5 us), and a few times that
// when run once between waits. This reader parses the same documents in well under a
// microsecond into one flat array of nodes, without an allocation per value: strings point into
// the text, and only strings with escapes are decoded (into one buffer sized once).
//
// It accepts exactly RFC 8259 JSON: one value, surrounded by optional whitespace; strings must be
// valid UTF-8 with valid escapes (surrogates paired); numbers follow the JSON grammar. It also
// bounds nesting and notes the first key repeated within an object. Everything else in the
// project keeps using nlohmann.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/status.h"

namespace mcd {

class JsonReader {
 public:
  enum class Kind : uint8_t { kNull, kBool, kInt, kUint, kFloat, kString, kArray, kObject };

  // One value. An object's members follow it as (key, value) pairs, each value with its own
  // subtree; an array's elements follow it likewise. `end` is one past the node's subtree.
  struct Node {
    Kind kind = Kind::kNull;
    bool boolean = false;
    uint32_t end = 0;
    uint32_t count = 0;      // members (object) or elements (array)
    int64_t int_value = 0;   // kInt: the integer fits int64
    uint64_t uint_value = 0; // kUint: a non-negative integer above INT64_MAX that fits uint64
    std::string_view text;   // kString: the decoded string; numbers: the literal
  };

  // Parses `text`, which must outlive the reader (strings without escapes point into it).
  // Errors (kInvalidArgument), with `what` as the subject:
  // "<what> is not valid JSON (byte N)" and "<what> nests deeper than <max_depth> levels".
  static Result<JsonReader> Parse(std::string_view text, int max_depth, const char* what);

  JsonReader(JsonReader&&) noexcept = default;
  JsonReader& operator=(JsonReader&&) noexcept = default;

  const Node& root() const { return nodes_.front(); }
  const Node& at(uint32_t index) const { return nodes_[index]; }
  uint32_t root_index() const { return 0; }

  // The value of member `key` of object node `object`, or nullopt (also when not an object).
  std::optional<uint32_t> Find(uint32_t object, std::string_view key) const;

  // Sets at[k] to the value of member keys[k] of object node `object` (the last one if a key
  // repeats; at[k] is left alone when absent: 0, the root, marks absence for callers that
  // zero it). Returns the first member whose key is not among `keys`, if any.
  // Inline: it is on the path of every command and reply.
  std::optional<std::string_view> IndexMembers(uint32_t object, const std::string_view* keys,
                                               size_t count, uint32_t* at) const {
    std::optional<std::string_view> unknown;
    ForEachMember(object, [&](std::string_view key, uint32_t value) {
      for (size_t k = 0; k < count; ++k) {
        if (key == keys[k]) {
          at[k] = value;
          return;
        }
      }
      if (!unknown) unknown = key;
    });
    return unknown;
  }

  // Calls fn(key, value_index) for each member of object node `object`, in order.
  template <typename Fn>
  void ForEachMember(uint32_t object, Fn&& fn) const {
    if (nodes_[object].kind != Kind::kObject) return;
    uint32_t i = object + 1;
    for (uint32_t n = 0; n < nodes_[object].count; ++n) {
      fn(nodes_[i].text, i + 1);
      i = nodes_[i + 1].end;
    }
  }

  // Calls fn(element_index) for each element of array node `array`, in order.
  template <typename Fn>
  void ForEachElement(uint32_t array, Fn&& fn) const {
    if (nodes_[array].kind != Kind::kArray) return;
    uint32_t i = array + 1;
    for (uint32_t n = 0; n < nodes_[array].count; ++n) {
      fn(i);
      i = nodes_[i].end;
    }
  }

  // The first key that some object repeats ("" if none): nlohmann would silently keep the last.
  const std::string& duplicate_key() const { return duplicate_; }

 private:
  JsonReader() = default;
  friend class JsonParser;

  std::vector<Node> nodes_;
  // Decoded strings with escapes, allocated once at the text's size (a decoded string is never
  // longer than its literal), on the heap so that views stay valid when the reader moves.
  std::unique_ptr<char[]> decoded_;
  size_t decoded_size_ = 0;
  std::string duplicate_;
};

}  // namespace mcd
