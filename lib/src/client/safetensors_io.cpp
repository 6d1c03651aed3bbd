// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// safetensors files in and out of tensor sets (client.h): LoadSafetensors maps the file and makes
// one set of its tensors, filled from the mapping; SaveSafetensors writes a set's members back as
// one file. The format itself: protocol/safetensors.h. The client's thread.
#include "client/client_impl.h"
#include "memcuda/file_in.h"
#include "memcuda/file_out.h"
#include "protocol/safetensors.h"

namespace mcd {

namespace {

// SaveSafetensors' file: the members `views` of set `set`, named without "<set>/", written whole
// or not at all (WriteFileWhole, as the tools' -o).
Status WriteSetFile(Client& client, const std::string& set, const std::vector<TensorView>& views,
                    const std::string& path) {
  std::vector<SafetensorsEntry> entries;
  uint64_t largest = 0;
  const std::string prefix = set + "/";
  for (const TensorView& view : views) {
    const TensorRecord& r = view.record;
    if (r.name.compare(0, prefix.size(), prefix) != 0) {  // a hash written by hand
      return Status(ErrorCode::kUnexpectedReply,
                    "tensor '" + r.name + "' says it is of set '" + set + "' but is not named so");
    }
    entries.push_back(SafetensorsEntry{r.name.substr(prefix.size()), r.dtype, r.shape, 0, r.bytes});
    largest = std::max(largest, r.bytes);
  }
  return WriteFileWhole(path, [&](int fd) -> Status {
    std::string head = SafetensorsHeader(entries);
    MCD_RETURN_IF_ERROR(WriteAllTo(fd, head, path));
    std::string buffer(largest, '\0');
    for (const TensorView& view : views) {
      MCD_RETURN_IF_ERROR(client.CopyToHost(view, buffer.data(), view.record.bytes));
      MCD_RETURN_IF_ERROR(WriteAllTo(fd, std::string_view(buffer.data(), view.record.bytes), path));
    }
    return Status::Ok();
  });
}

}  // namespace

Result<std::vector<TensorRecord>> Client::LoadSafetensors(const std::string& path,
                                                          const std::string& set, int device,
                                                          Lifetime lifetime) {
  MCD_RETURN_IF_ERROR(ValidateNewName(set));
  MCD_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  const std::string_view whole(file.data(), file.size());
  auto header = SafetensorsHeaderSize(whole.substr(0, 8), file.size());
  if (!header.ok()) return Status(header.status().code(), path + ": " + header.status().message());
  const uint64_t data_at = 8 + header.value();
  auto entries = ParseSafetensorsHeader(whole.substr(8, header.value()), file.size() - data_at);
  if (!entries.ok()) {
    return Status(entries.status().code(), path + ": " + entries.status().message());
  }
  CreateSetSpec spec;
  spec.name = set;
  spec.device = device;
  spec.lifetime = lifetime;
  for (const SafetensorsEntry& entry : entries.value()) {
    SetMember member;
    member.name = set + "/" + entry.name;
    Status valid = ValidateName(member.name);
    if (!valid.ok()) {
      return Status(ErrorCode::kInvalidArgument, path + ": tensor '" + entry.name +
                                                     "' cannot be named '" + member.name +
                                                     "': " + valid.message());
    }
    member.dtype = entry.dtype;
    member.shape = entry.shape;
    spec.members.push_back(std::move(member));
    spec.contents.push_back(file.data() + data_at + entry.begin);
  }
  return CreateSet(spec);
}

Status Client::SaveSafetensors(const std::string& set, const std::string& path) {
  MCD_ASSIGN_OR_RETURN(std::vector<TensorView> views, GetSet(set));
  Status written = SaveSafetensors(views, path);
  auto released = ReleaseSet(views);  // whatever happened
  if (written.ok() && !released.ok()) return released.status();
  return written;
}

Status Client::SaveSafetensors(const std::vector<TensorView>& members, const std::string& path) {
  if (members.empty()) return Status(ErrorCode::kInvalidArgument, "a tensor set has members");
  return WriteSetFile(*this, members.front().record.set, members, path);
}

}  // namespace mcd
