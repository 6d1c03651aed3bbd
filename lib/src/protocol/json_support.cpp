// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "protocol/json_support.h"

#include "protocol/text.h"

namespace mcd {

Status ParseJson(std::string_view text, int max_depth, const char* what, PooledDocument& pooled) {
  Document& doc = pooled.doc();
  rj::ParseResult result;
  bool too_deep = false;
  auto generate = [&](Document& handler) {
    DepthLimit limit(handler, max_depth);
    rj::MemoryStream memory(text.data(), text.size());
    rj::EncodedInputStream<rj::UTF8<>, rj::MemoryStream> in(memory);
    Reader reader(&pooled.pool(), 256);
    result = reader.Parse<rj::kParseIterativeFlag | rj::kParseValidateEncodingFlag>(in, limit);
    too_deep = limit.too_deep();
    // The reader takes a NUL byte for the end of its input: whatever follows one is refused here.
    if (!result.IsError() && in.Tell() != text.size()) {
      result.Set(rj::kParseErrorDocumentRootNotSingular, in.Tell());
    }
    return !result.IsError();
  };
  doc.Populate(generate);
  if (too_deep) {
    return Invalid(std::string(what) + " nests deeper than " + std::to_string(max_depth) +
                   " levels");
  }
  if (result.IsError()) {
    return Invalid(std::string(what) + " is not valid JSON (byte " +
                   std::to_string(result.Offset()) + ": " + rj::GetParseError_En(result.Code()) +
                   ")");
  }
  return Status::Ok();
}

std::string UnicodeSafe(std::string_view text) {
  rj::MemoryStream memory(text.data(), text.size());
  rj::EncodedInputStream<rj::UTF8<>, rj::MemoryStream> in(memory);
  rj::GenericStringBuffer<rj::UTF8<>> valid;
  while (in.Tell() < text.size()) {
    size_t start = in.Tell();
    unsigned codepoint = 0;
    if (rj::UTF8<>::Decode(in, &codepoint)) {
      rj::UTF8<>::Encode(valid, codepoint);
    } else {
      if (in.Tell() == start) in.Take();  // always move on
      rj::UTF8<>::Encode(valid, 0xFFFDu);
    }
  }
  return std::string(valid.GetString(), valid.GetSize());
}

namespace {

// check many bytes at a time: names, handles and owners are short ASCII.
bool IsAscii(std::string_view text) {
  unsigned char any = 0;
  for (char c : text) any = static_cast<unsigned char>(any | static_cast<unsigned char>(c));
  return any < 0x80;
}

}  // namespace

void WriteString(Writer& w, std::string_view text) {
  if (IsAscii(text)) {
    w.String(text.data(), static_cast<rj::SizeType>(text.size()));
    return;
  }
  std::string safe = UnicodeSafe(text);
  w.String(safe.data(), static_cast<rj::SizeType>(safe.size()));
}

void WriteKeyString(Writer& w, const char* key, std::string_view text) {
  w.Key(key);
  WriteString(w, text);
}

void WriteShape(Writer& w, const std::vector<int64_t>& shape) {
  w.StartArray();
  for (int64_t dim : shape) w.Int64(dim);
  w.EndArray();
}

}  // namespace mcd
