// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// The C ABI over mcd::Client. No exception crosses this boundary.
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/version_info.h"
#include "memcuda/client.h"
#include "memcuda/memcuda.h"
#include "protocol/json_support.h"

struct mcd_client {
  std::unique_ptr<mcd::Client> client;
  std::string last_error;
};

namespace {

thread_local std::string tls_connect_error;

int32_t Fail(mcd_client* c, const mcd::Status& status) {
  if (c != nullptr) c->last_error = status.message();
  return static_cast<int32_t>(status.code());
}

int32_t Check(mcd_client* c, const char* name) {
  if (c == nullptr || c->client == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  if (name == nullptr) {
    c->last_error = "name is NULL";
    return MCD_ERR_INVALID_ARGUMENT;
  }
  return MCD_OK;
}

void Fill(const mcd::TensorRecord& r, void* data, mcd_tensor* out) {
  if (out == nullptr) return;
  std::memset(out, 0, sizeof(*out));
  std::strncpy(out->name, r.name.c_str(), sizeof(out->name) - 1);
  std::strncpy(out->dtype, mcd::DTypeName(r.dtype), sizeof(out->dtype) - 1);
  out->device = r.device;
  out->ndim = static_cast<int32_t>(r.shape.size());
  for (size_t i = 0; i < r.shape.size() && i < MCD_MAX_DIMS; ++i) out->shape[i] = r.shape[i];
  out->bytes = r.bytes;
  out->refcount = r.refcount;
  out->data = data;
}

// A string handed out, freed by the caller with mcd_free.
int32_t CopyOut(mcd_client* c, const std::string& text, char** out) {
  *out = static_cast<char*>(std::malloc(text.size() + 1));
  if (*out == nullptr)
    return Fail(c, mcd::Status(mcd::ErrorCode::kOutOfMemory, "out of host memory"));
  std::memcpy(*out, text.c_str(), text.size() + 1);
  return MCD_OK;
}

template <typename Fn>
int32_t Guard(mcd_client* c, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    return Fail(c, mcd::Status(mcd::ErrorCode::kInternal, e.what()));
  } catch (...) {
    return Fail(c, mcd::Status(mcd::ErrorCode::kInternal, "unknown exception"));
  }
}

}  // namespace

extern "C" {

int32_t mcd_connect(const char* redis_url, const char* node, int32_t timeout_ms, mcd_client** out) {
  if (out == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  try {
    mcd::ClientOptions options;
    auto url = mcd::ResolveRedisUrl(redis_url != nullptr ? redis_url : "");
    if (!url.ok()) {
      tls_connect_error = url.status().message();
      return static_cast<int32_t>(url.status().code());
    }
    options.redis_url = url.value();
    if (node != nullptr) options.node = node;
    if (timeout_ms > 0) options.timeout_ms = timeout_ms;
    auto client = mcd::Client::Connect(options);
    if (!client.ok()) {
      tls_connect_error = client.status().message();
      return static_cast<int32_t>(client.status().code());
    }
    *out = new mcd_client{std::move(client).value(), ""};
    return MCD_OK;
  } catch (const std::exception& e) {
    tls_connect_error = e.what();
    return MCD_ERR_INTERNAL;
  }
}

void mcd_disconnect(mcd_client* client) { delete client; }

const char* mcd_version(void) { return MCD_VERSION; }
const char* mcd_version_info(void) {
  static const std::string text = mcd::VersionInfo();
  return text.c_str();
}
int32_t mcd_abi_version(void) { return MCD_ABI_VERSION; }

// The caller's options, or the defaults; the caller's struct may be older (smaller) than this
// library's: what it lacks is default.
static int32_t ReadOptions(mcd_client* c, const mcd_create_options* options,
                           mcd_create_options& opt) {
  opt = mcd_create_options{};
  if (options != nullptr) {
    if (options->size < offsetof(mcd_create_options, lifetime) + sizeof(int32_t)) {
      return Fail(c,
                  mcd::Status(mcd::ErrorCode::kInvalidArgument,
                              "mcd_create_options.size is not set (sizeof(mcd_create_options))"));
    }
    std::memcpy(&opt, options, std::min<size_t>(options->size, sizeof(opt)));
  }
  if (opt.lifetime != MCD_LIFETIME_HEAP && opt.lifetime != MCD_LIFETIME_STACK) {
    return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument,
                               "lifetime must be MCD_LIFETIME_HEAP or MCD_LIFETIME_STACK"));
  }
  return MCD_OK;
}

int32_t mcd_create(mcd_client* c, const char* name, const char* dtype, const int64_t* shape,
                   int32_t ndim, int32_t device, mcd_tensor* out) {
  return mcd_create_ex(c, name, dtype, shape, ndim, device, nullptr, out);
}

int32_t mcd_create_ex(mcd_client* c, const char* name, const char* dtype, const int64_t* shape,
                      int32_t ndim, int32_t device, const mcd_create_options* options,
                      mcd_tensor* out) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  mcd_create_options opt{};
  if (int32_t rc = ReadOptions(c, options, opt); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    auto parsed = mcd::ParseDType(dtype != nullptr ? dtype : "");
    if (!parsed)
      return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument,
                                 "unknown dtype (expected " + mcd::DTypeNames() + ")"));
    if (shape == nullptr || ndim <= 0 || ndim > MCD_MAX_DIMS) {
      return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "shape needs 1 to 8 dims"));
    }
    mcd::CreateSpec spec;
    spec.name = name;
    spec.dtype = *parsed;
    spec.shape.assign(shape, shape + ndim);
    spec.device = device;
    spec.lifetime =
        opt.lifetime == MCD_LIFETIME_STACK ? mcd::Lifetime::kStack : mcd::Lifetime::kHeap;
    spec.zero_init = opt.no_init == 0;
    spec.owner_pid = opt.owner_pid;
    spec.contents = opt.data;
    spec.contents_bytes = opt.data_bytes;
    auto record = c->client->Create(spec);
    if (!record.ok()) return Fail(c, record.status());
    Fill(record.value(), nullptr, out);
    return MCD_OK;
  });
}

static int32_t Map(mcd_client* c, const char* name, mcd_tensor* out, bool take_ref) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    auto view = take_ref ? c->client->Get(name) : c->client->Open(name);
    if (!view.ok()) return Fail(c, view.status());
    Fill(view->record, view->data, out);
    return MCD_OK;
  });
}

int32_t mcd_get(mcd_client* c, const char* name, mcd_tensor* out) {
  return Map(c, name, out, true);
}
int32_t mcd_open(mcd_client* c, const char* name, mcd_tensor* out) {
  return Map(c, name, out, false);
}

int32_t mcd_release(mcd_client* c, const char* name) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    auto record = c->client->Release(name);
    return record.ok() ? MCD_OK : Fail(c, record.status());
  });
}

// The names of a batched call, or an error set on the client.
static int32_t Names(mcd_client* c, const char* const* names, size_t count,
                     std::vector<std::string>* out) {
  if (c == nullptr || c->client == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  if (names == nullptr && count > 0) return Check(c, nullptr);
  for (size_t i = 0; i < count; ++i) {
    if (int32_t rc = Check(c, names[i]); rc != MCD_OK) return rc;
    out->emplace_back(names[i]);
  }
  return MCD_OK;
}

int32_t mcd_get_many(mcd_client* c, const char* const* names, size_t count, mcd_tensor* out) {
  if (out == nullptr) return Check(c, nullptr);  // the views would be lost, the references held
  return Guard(c, [&]() -> int32_t {
    std::vector<std::string> list;
    if (int32_t rc = Names(c, names, count, &list); rc != MCD_OK) return rc;
    auto views = c->client->GetMany(list);
    if (!views.ok()) return Fail(c, views.status());
    for (size_t i = 0; i < views->size(); ++i) {
      Fill((*views)[i].record, (*views)[i].data, &out[i]);
    }
    return MCD_OK;
  });
}

int32_t mcd_release_many(mcd_client* c, const char* const* names, size_t count) {
  if (c == nullptr || c->client == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  return Guard(c, [&]() -> int32_t {
    std::vector<std::string> list;
    if (int32_t rc = Names(c, names, count, &list); rc != MCD_OK) return rc;
    auto records = c->client->ReleaseMany(list);
    return records.ok() ? MCD_OK : Fail(c, records.status());
  });
}

int32_t mcd_create_set(mcd_client* c, const char* set, const mcd_set_member* members, size_t count,
                       int32_t device, const mcd_create_options* options) {
  if (int32_t rc = Check(c, set); rc != MCD_OK) return rc;
  mcd_create_options opt{};
  if (int32_t rc = ReadOptions(c, options, opt); rc != MCD_OK) return rc;
  if (members == nullptr && count > 0) return Check(c, nullptr);
  return Guard(c, [&]() -> int32_t {
    mcd::CreateSetSpec spec;
    spec.name = set;
    spec.device = device;
    spec.lifetime =
        opt.lifetime == MCD_LIFETIME_STACK ? mcd::Lifetime::kStack : mcd::Lifetime::kHeap;
    spec.zero_init = opt.no_init == 0;
    for (size_t i = 0; i < count; ++i) {
      const mcd_set_member& m = members[i];
      auto dtype = mcd::ParseDType(m.dtype != nullptr ? m.dtype : "");
      if (m.name == nullptr || !dtype || m.shape == nullptr || m.ndim <= 0 ||
          m.ndim > MCD_MAX_DIMS) {
        return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument,
                                   "member " + std::to_string(i + 1) + " needs a name, a dtype (" +
                                       mcd::DTypeNames() + ") and 1 to 8 dims"));
      }
      mcd::SetMember member;
      member.name = m.name;
      member.dtype = *dtype;
      member.shape.assign(m.shape, m.shape + m.ndim);
      spec.members.push_back(std::move(member));
      if (m.data != nullptr) {
        auto bytes = mcd::ShapeBytes(spec.members.back().shape, *dtype);
        if (!bytes.ok() || *bytes != m.data_bytes) {
          return Fail(
              c, mcd::Status(mcd::ErrorCode::kInvalidArgument,
                             "member '" + std::string(m.name) + "': data_bytes is not its size"));
        }
        spec.contents.push_back(m.data);
      }
    }
    if (!spec.contents.empty() && spec.contents.size() != count) {
      return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument,
                                 "data for some members and not others: all or none"));
    }
    auto records = c->client->CreateSet(spec);
    return records.ok() ? MCD_OK : Fail(c, records.status());
  });
}

int32_t mcd_get_set(mcd_client* c, const char* set, mcd_tensor** out, size_t* count) {
  if (int32_t rc = Check(c, set); rc != MCD_OK) return rc;
  if (out == nullptr || count == nullptr) return Check(c, nullptr);
  return Guard(c, [&]() -> int32_t {
    auto views = c->client->GetSet(set);
    if (!views.ok()) return Fail(c, views.status());
    *out = static_cast<mcd_tensor*>(std::malloc(views->size() * sizeof(mcd_tensor)));
    if (*out == nullptr) {
      (void)c->client->ReleaseSet(*views);
      return Fail(c, mcd::Status(mcd::ErrorCode::kOutOfMemory, "no host memory for the set"));
    }
    for (size_t i = 0; i < views->size(); ++i) {
      Fill((*views)[i].record, (*views)[i].data, &(*out)[i]);
    }
    *count = views->size();
    return MCD_OK;
  });
}

// The views of `count` tensors as mcd_get/mcd_get_set handed them out, found open here by name
// and address; or an error set on the client.
static int32_t Views(mcd_client* c, const mcd_tensor* tensors, size_t count,
                     std::vector<mcd::TensorView>* out) {
  if (c == nullptr || c->client == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  if (tensors == nullptr && count > 0) return Check(c, nullptr);
  for (size_t i = 0; i < count; ++i) {
    if (std::memchr(tensors[i].name, '\0', sizeof(tensors[i].name)) == nullptr) {
      return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "a tensor's name is unended"));
    }
    auto view = c->client->Opened(tensors[i].name, tensors[i].data);
    if (!view.ok()) return Fail(c, view.status());
    out->push_back(std::move(view).value());
  }
  return MCD_OK;
}

int32_t mcd_release_references(mcd_client* c, const char* const* names, size_t count) {
  return Guard(c, [&]() -> int32_t {
    std::vector<std::string> list;
    if (int32_t rc = Names(c, names, count, &list); rc != MCD_OK) return rc;
    auto released = c->client->ReleaseReferences(list);
    return released.ok() ? MCD_OK : Fail(c, released.status());
  });
}

int32_t mcd_release_set(mcd_client* c, const mcd_tensor* members, size_t count) {
  return Guard(c, [&]() -> int32_t {
    std::vector<mcd::TensorView> views;
    if (int32_t rc = Views(c, members, count, &views); rc != MCD_OK) return rc;
    auto released = c->client->ReleaseSet(views);
    return released.ok() ? MCD_OK : Fail(c, released.status());
  });
}

int32_t mcd_close_view(mcd_client* c, const mcd_tensor* view) {
  return Guard(c, [&]() -> int32_t {
    std::vector<mcd::TensorView> views;
    if (int32_t rc = Views(c, view, 1, &views); rc != MCD_OK) return rc;
    mcd::Status closed = c->client->Close(views.front());
    return closed.ok() ? MCD_OK : Fail(c, closed);
  });
}

// A copy through a view this process holds: its own mapping, whatever its name names now.
static int32_t CopyView(mcd_client* c, const mcd_tensor* t, void* dst, const void* src,
                        uint64_t bytes) {
  return Guard(c, [&]() -> int32_t {
    std::vector<mcd::TensorView> views;
    if (int32_t rc = Views(c, t, 1, &views); rc != MCD_OK) return rc;
    mcd::Status copied = dst != nullptr ? c->client->CopyToHost(views.front(), dst, bytes)
                                        : c->client->CopyFromHost(views.front(), src, bytes);
    return copied.ok() ? MCD_OK : Fail(c, copied);
  });
}

int32_t mcd_view_to_host(mcd_client* c, const mcd_tensor* view, void* dst, uint64_t bytes) {
  if (dst == nullptr && bytes > 0)
    return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "dst is NULL"));
  static char none;
  return CopyView(c, view, dst != nullptr ? dst : &none, nullptr, bytes);
}

int32_t mcd_view_from_host(mcd_client* c, const mcd_tensor* view, const void* src, uint64_t bytes) {
  if (src == nullptr && bytes > 0)
    return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "src is NULL"));
  return CopyView(c, view, nullptr, src, bytes);
}

int32_t mcd_load_safetensors(mcd_client* c, const char* path, const char* set, int32_t device) {
  if (int32_t rc = Check(c, set); rc != MCD_OK) return rc;
  if (int32_t rc = Check(c, path); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    auto members = c->client->LoadSafetensors(path, set, device);
    return members.ok() ? MCD_OK : Fail(c, members.status());
  });
}

int32_t mcd_save_safetensors(mcd_client* c, const char* set, const char* path) {
  if (int32_t rc = Check(c, set); rc != MCD_OK) return rc;
  if (int32_t rc = Check(c, path); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    mcd::Status saved = c->client->SaveSafetensors(set, path);
    return saved.ok() ? MCD_OK : Fail(c, saved);
  });
}

int32_t mcd_close(mcd_client* c, const char* name) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    mcd::Status closed = c->client->Close(name);
    return closed.ok() ? MCD_OK : Fail(c, closed);
  });
}

int32_t mcd_release_reference(mcd_client* c, const char* name) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    auto record = c->client->ReleaseReference(name);
    return record.ok() ? MCD_OK : Fail(c, record.status());
  });
}

static int32_t CopyHost(mcd_client* c, const char* name, void* dst, const void* src,
                        uint64_t bytes) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    // A read checks afterwards that the tensor was not removed meanwhile (Client::CopyToHost);
    // a write cannot be undone, so it holds a reference of its own while it writes.
    const bool write = dst == nullptr;
    auto view = write ? c->client->Get(name) : c->client->Open(name);
    // A client whose references would bind to init (pid 1, which never gives them back) takes
    // none: it writes without one, as mcd_copy_from_host documents.
    if (write && view.status().code() == mcd::ErrorCode::kInvalidArgument &&
        c->client->BindsToInit()) {
      view = c->client->Open(name);
    }
    if (!view.ok()) return Fail(c, view.status());
    mcd::Status copied = bytes > view->record.bytes
                             ? mcd::Status(mcd::ErrorCode::kInvalidArgument,
                                           std::to_string(bytes) + " bytes asked of a tensor of " +
                                               std::to_string(view->record.bytes))
                         : write ? c->client->CopyFromHost(*view, src, bytes)
                                 : c->client->CopyToHost(*view, dst, bytes);
    // The Open's or Get's mapping, not another of its name (a set's member still held).
    mcd::Status closed = c->client->Close(*view);
    if (write && view->referenced) {
      auto released = c->client->ReleaseReference(name);
      if (closed.ok()) closed = released.status();
    }
    if (!copied.ok()) return Fail(c, copied);
    return closed.ok() ? MCD_OK : Fail(c, closed);
  });
}

int32_t mcd_copy_to_host(mcd_client* c, const char* name, void* dst, uint64_t bytes) {
  if (dst == nullptr && bytes > 0)
    return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "dst is NULL"));
  static char none;
  return CopyHost(c, name, dst != nullptr ? dst : &none, nullptr, bytes);
}

int32_t mcd_copy_from_host(mcd_client* c, const char* name, const void* src, uint64_t bytes) {
  if (src == nullptr && bytes > 0)
    return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "src is NULL"));
  return CopyHost(c, name, nullptr, src, bytes);
}

int32_t mcd_stat_json(mcd_client* c, const char* name, char** json_out) {
  if (json_out != nullptr) *json_out = nullptr;
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  if (json_out == nullptr)
    return Fail(c, mcd::Status(mcd::ErrorCode::kInvalidArgument, "json_out is NULL"));
  return Guard(c, [&]() -> int32_t {
    auto record = c->client->Stat(name);
    if (!record.ok()) return Fail(c, record.status());
    return CopyOut(c, mcd::RecordToJson(record.value()), json_out);
  });
}

int32_t mcd_stat(mcd_client* c, const char* name, mcd_tensor* out) {
  if (int32_t rc = Check(c, name); rc != MCD_OK) return rc;
  return Guard(c, [&]() -> int32_t {
    auto record = c->client->Stat(name);
    if (!record.ok()) return Fail(c, record.status());
    Fill(record.value(), nullptr, out);
    return MCD_OK;
  });
}

int32_t mcd_list_json(mcd_client* c, const char* glob, char** json_out) {
  if (c == nullptr || json_out == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  *json_out = nullptr;
  return Guard(c, [&]() -> int32_t {
    auto records = c->client->List(glob != nullptr ? glob : "*");
    if (!records.ok()) return Fail(c, records.status());
    std::string json = "[";
    for (const auto& r : records.value())
      json += (json.size() > 1 ? "," : "") + mcd::RecordToJson(r);
    json += "]";
    return CopyOut(c, json, json_out);
  });
}

int32_t mcd_set_members_json(mcd_client* c, const char* set, char** json_out) {
  if (c == nullptr || set == nullptr || json_out == nullptr) return MCD_ERR_INVALID_ARGUMENT;
  *json_out = nullptr;
  return Guard(c, [&]() -> int32_t {
    auto members = c->client->SetMembers(set);
    if (!members.ok()) return Fail(c, members.status());
    mcd::PooledWriter out;
    out.w().StartArray();
    for (const std::string& name : members.value()) mcd::WriteString(out.w(), name);
    out.w().EndArray();
    return CopyOut(c, out.str(), json_out);
  });
}

void mcd_free(void* p) { std::free(p); }

const char* mcd_error_name(int32_t code) { return mcd::ErrorName(code); }

const char* mcd_last_error(const mcd_client* client) {
  return client != nullptr ? client->last_error.c_str() : tls_connect_error.c_str();
}

}  // extern "C"
