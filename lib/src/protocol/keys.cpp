// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "memcuda/keys.h"

namespace mcd {

std::string KeySpace::Tensor(std::string_view name) const {
  return prefix + ":tensor:{" + std::string(name) + "}";
}

std::string KeySpace::NameFromTensorKey(std::string_view key) const {
  std::string head = prefix + ":tensor:{";
  if (key.size() < head.size() + 2 || key.substr(0, head.size()) != head || key.back() != '}') {
    return "";
  }
  return std::string(key.substr(head.size(), key.size() - head.size() - 1));
}

std::string KeySpace::TensorPattern(std::string_view glob) const {
  // Names cannot hold glob or brace characters, so only the user's glob is a pattern.
  return prefix + ":tensor:{" + std::string(glob.empty() ? "*" : glob) + "}";
}

std::string KeySpace::Reply(std::string_view req) const {
  return prefix + ":reply:" + std::string(req);
}
std::string KeySpace::Done(std::string_view req) const {
  return prefix + ":req:" + std::string(req);
}
std::string KeySpace::Server(std::string_view node) const {
  return prefix + ":server:" + std::string(node);
}
std::string KeySpace::Processing(std::string_view node) const {
  return prefix + ":processing:" + std::string(node);
}

std::string KeySpace::NodeQueue(std::string_view node) const {
  return queue + ":" + std::string(node);
}

std::string KeySpace::Holders(std::string_view node) const {
  return prefix + ":holders:" + std::string(node);
}
std::string KeySpace::Held(std::string_view node, std::string_view holder) const {
  return prefix + ":held:" + std::string(node) + ":" + std::string(holder);
}

std::string KeySpace::CopyGrant(std::string_view id) const {
  return prefix + ":copy:" + std::string(id);
}

std::string KeySpace::Events() const { return prefix + ":events"; }

std::string KeySpace::Set(std::string_view name) const {
  return prefix + ":set:{" + std::string(name) + "}";
}

std::string KeySpace::SetRecord(std::string_view name) const {
  return prefix + ":setm:{" + std::string(name) + "}";
}

std::string KeySpace::Members(std::string_view id) const {
  return prefix + ":members:" + std::string(id);
}

std::string KeySpace::Unused() const { return prefix + ":-"; }

}  // namespace mcd
