// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// What the protocol's JSON codec is built from (json_codec.h says what it offers). Reading:
// RapidJSON's SAX reader fills a document through DepthLimit, which refuses nesting deeper than
// the caller allows before anything deeper is built (iterative parsing, so no recursion on
// hostile input either); the document lives in a pool on the stack. Writing: RapidJSON's Writer,
// after UnicodeSafe has replaced invalid UTF-8. Private to protocol/.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/encodedstream.h>
#include <rapidjson/encodings.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cassert>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memcuda/status.h"

namespace mcd {

namespace rj = rapidjson;

using Pool = rj::MemoryPoolAllocator<>;
// Nodes and the parser's stacks both in the pool.
using Document = rj::GenericDocument<rj::UTF8<>, Pool, Pool>;
using Reader = rj::GenericReader<rj::UTF8<>, rj::UTF8<>, Pool>;

// A document whose nodes and parsing stacks live in a buffer on the caller's stack: a command or
// a reply fits in it, so reading one allocates nothing (a larger text spills into the heap).
class PooledDocument {
 public:
  PooledDocument() : pool_(buffer_, sizeof(buffer_)), doc_(&pool_, 256, &pool_) {}
  Document& doc() { return doc_; }
  Pool& pool() { return pool_; }

 private:
  char buffer_[8192];
  Pool pool_;
  Document doc_;
};

// Forwards the reader's events to the document, and stops at nesting deeper than `max_depth`.
class DepthLimit {
 public:
  DepthLimit(Document& doc, int max_depth) : doc_(doc), max_depth_(max_depth) {}
  bool Null() { return doc_.Null(); }
  bool Bool(bool b) { return doc_.Bool(b); }
  bool Int(int i) { return doc_.Int(i); }
  bool Uint(unsigned u) { return doc_.Uint(u); }
  bool Int64(int64_t i) { return doc_.Int64(i); }
  bool Uint64(uint64_t u) { return doc_.Uint64(u); }
  bool Double(double d) { return doc_.Double(d); }
  bool RawNumber(const char* str, rj::SizeType length, bool copy) {
    return doc_.RawNumber(str, length, copy);
  }
  bool String(const char* str, rj::SizeType length, bool copy) {
    return doc_.String(str, length, copy);
  }
  bool Key(const char* str, rj::SizeType length, bool copy) { return doc_.Key(str, length, copy); }
  bool StartObject() { return Enter() && doc_.StartObject(); }
  bool EndObject(rj::SizeType members) { return Leave() && doc_.EndObject(members); }
  bool StartArray() { return Enter() && doc_.StartArray(); }
  bool EndArray(rj::SizeType elements) { return Leave() && doc_.EndArray(elements); }
  bool too_deep() const { return too_deep_; }

 private:
  bool Enter() {
    too_deep_ = ++depth_ > max_depth_;
    return !too_deep_;
  }
  bool Leave() {
    --depth_;
    return true;
  }
  Document& doc_;
  int max_depth_;
  int depth_ = 0;
  bool too_deep_ = false;
};

// Parses `text` (not NUL-terminated; a NUL byte in it is an error, not its end) into the
// document of `pooled`; `what` names the text in errors.
Status ParseJson(std::string_view text, int max_depth, const char* what, PooledDocument& pooled);

inline std::string_view Text(const rj::Value& value) {
  return {value.GetString(), value.GetStringLength()};
}

// `text` as valid UTF-8: each invalid sequence replaced by U+FFFD, so that what is written is
// JSON whatever a hand-written hash or a Redis error held.
std::string UnicodeSafe(std::string_view text);

using Buffer = rj::GenericStringBuffer<rj::UTF8<>, Pool>;
using Writer = rj::Writer<Buffer, rj::UTF8<>, rj::UTF8<>, Pool>;

// A writer whose output and nesting stack live in a buffer on the caller's stack: writing a
// command, a reply or a record allocates only the string it returns.
class PooledWriter {
 public:
  PooledWriter() : pool_(buffer_, sizeof(buffer_)), out_(&pool_, 1024), writer_(out_, &pool_, 8) {}
  Writer& w() { return writer_; }
  std::string str() const { return std::string(out_.GetString(), out_.GetSize()); }

 private:
  char buffer_[4096];
  Pool pool_;
  Buffer out_;
  Writer writer_;
};

// True when every byte is below 0x80. Or-ing them all, without an early exit, lets the compiler
// A string value, valid UTF-8 whatever `text` holds.
void WriteString(Writer& w, std::string_view text);
void WriteKeyString(Writer& w, const char* key, std::string_view text);
void WriteShape(Writer& w, const std::vector<int64_t>& shape);

// Indexes an object's members by `keys`: each known key's value (nullptr when absent), the first
// unknown key and the first repeated one.
template <size_t N>
struct MemberIndex {
  const rj::Value* at[N] = {};
  std::string_view unknown;
  std::string_view repeated;
  bool has_unknown = false;

  MemberIndex(const rj::Value& object, const std::string_view (&keys)[N]) {
    for (auto m = object.MemberBegin(); m != object.MemberEnd(); ++m) {
      std::string_view key = Text(m->name);
      size_t f = 0;
      while (f < N && keys[f] != key) ++f;
      if (f == N) {
        for (auto earlier = object.MemberBegin(); earlier != m && repeated.empty(); ++earlier) {
          if (Text(earlier->name) == key) repeated = key;
        }
        if (!has_unknown) unknown = key;
        has_unknown = true;
      } else if (at[f] != nullptr) {
        if (repeated.empty()) repeated = key;
      } else {
        at[f] = &m->value;
      }
    }
  }
};

}  // namespace mcd
