// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

#include "server/applier.h"

#include <algorithm>

#include "common/log.h"
#include "common/process.h"
#include "protocol/json_codec.h"
#include "protocol/not_held.h"
#include "redis/script_calls.h"
#include "server/set_applier.h"

namespace mcd {

CommandApplier::CommandApplier(ApplierOptions opt, CommitPipeline& pipeline, Intake& intake,
                               TensorTable& table, DeviceSet& devices, OutcomeLog& outcomes,
                               NodeCopier& copier)
    : opt_(std::move(opt)),
      pipeline_(pipeline),
      intake_(intake),
      table_(table),
      devices_(devices),
      outcomes_(outcomes),
      copier_(copier),
      responder_(opt_.keys.Processing(opt_.node), pipeline, intake),
      sets_(std::make_unique<SetApplier>(opt_, pipeline, table, devices, outcomes, responder_,
                                         copier)) {}

CommandApplier::~CommandApplier() = default;

namespace {
// Whether `touches(n)` holds for `name` or for a set it may be a member of (a prefix of it up
// to a '/'): a command on a member waits for a create_set of its set.
template <typename Touches>
bool NameOrSet(const std::string& name, Touches touches) {
  for (size_t slash = name.find('/'); slash != std::string::npos;
       slash = name.find('/', slash + 1)) {
    if (touches(name.substr(0, slash))) return true;
  }
  return touches(name);
}
}  // namespace

void CommandApplier::ProcessBatch(std::vector<Request> requests) {
  std::vector<std::string> touched;
  bool from_socket = false;
  for (Request& request : requests) {
    from_socket = from_socket || request.route.socket();
    if (request.overlong) {
      Status status(ErrorCode::kTooLarge, "command line is over the limit of " +
                                              std::to_string(kMaxCommandBytes) +
                                              " bytes; the connection is closed");
      intake_.Answer(request.route, ErrorReplyJson("", nullptr, status));
      outcomes_.Record("invalid", "", status, Clock::now(), "via=socket");
      intake_.CloseConnection(request.route.conn);
      continue;
    }
    const Result<Command>& parsed = request.parsed;
    if (parsed.ok() && !request.route.socket() && parsed->sent_ms > 0)
      outcomes_.RecordQueueWait(NowMs() - parsed->sent_ms);
    if (parsed.ok()) {
      auto in_batch = [&](const std::string& n) {
        return std::find(touched.begin(), touched.end(), n) != touched.end();
      };
      auto due = [&](const std::string& n) { return pipeline_.IsDue(n); };
      if (NameOrSet(parsed->name, in_batch)) {
        pipeline_.Flush();
        pipeline_.Drain();
        touched.clear();
      } else if (NameOrSet(parsed->name, due)) {
        pipeline_.Drain();  // its result decides what this command finds
      }
      touched.push_back(parsed->name);
    }
    Handle(request);
  }
  intake_.set_last_from_socket(from_socket);
  pipeline_.Flush();
}

template <typename Then>
void CommandApplier::Queue(Pending pending, Request& request, Then then) {
  // The request moves into the continuation: its strings are not copied on their way.
  pending.done = [this, request = std::move(request), then = std::move(then)](
                     Pending& p, Result<CommitResult> committed) mutable {
    responder_.Committed(p, std::move(committed),
                         [&](Result<CommitResult> r) { then(request, std::move(r)); });
  };
  pipeline_.Queue(std::move(pending));
}

Status CommandApplier::ResumeUnfinished() {
  // Commands taken from the queue but not committed (by a previous instance of this node, or
  // before a lost connection), oldest first. A committed command is no longer in the list.
  MCD_ASSIGN_OR_RETURN(RedisValue left,
                       pipeline_.Command({"LRANGE", opt_.keys.Processing(opt_.node), "0", "-1"}));
  std::vector<Request> requests;
  for (auto it = left.elements.rbegin(); it != left.elements.rend(); ++it) {
    if (!intake_.IsWakeMarker(it->str)) requests.push_back(Intake::FromList(std::move(it->str)));
  }
  if (!requests.empty())
    Log(LogLevel::kInfo, "resuming " + std::to_string(requests.size()) + " unfinished command(s)");
  ProcessBatch(std::move(requests));
  return Status::Ok();
}

void CommandApplier::DropEmptiedSets() { sets_->DropEmptied(); }

void CommandApplier::ResumeNow() {
  // Nothing is due and no take is out: the processing list holds only the left commands.
  responder_.BeginResume();
  Status resumed = ResumeUnfinished();
  if (!resumed.ok()) Log(LogLevel::kWarn, "resuming commands: " + resumed.ToString());
  pipeline_.Drain();
  responder_.EndResume();
}

void CommandApplier::Handle(Request& request) {
  auto t0 = Clock::now();
  if (!request.parsed.ok()) {
    responder_.Fail(request, nullptr, request.parsed.status());
    outcomes_.Record("invalid", "", request.parsed.status(), t0);
    return;
  }
  const Command& cmd = request.parsed.value();
  if (cmd.node && *cmd.node != opt_.node) {
    if (!request.route.socket() && Forwarded(request.raw, *cmd.node)) {
      return outcomes_.Record(OpName(cmd.op), cmd.name, Status::Ok(), t0,
                              "forwarded_to=" + *cmd.node);
    }
    Status status(ErrorCode::kWrongNode, "command is for node '" + *cmd.node +
                                             "', which has no live server on this Redis (this "
                                             "server serves '" +
                                             opt_.node + "')");
    responder_.Fail(request, OpName(cmd.op), status);
    outcomes_.Record(OpName(cmd.op), cmd.name, status, t0);
    return;
  }
  switch (cmd.op) {
    case Op::kCreate:
      HandleCreate(request);
      break;
    case Op::kGet:
      HandleRefcount(request, +1);
      break;
    case Op::kDelete:
      HandleRefcount(request, -1);
      break;
    case Op::kPublish:
      if (cmd.set) return sets_->HandlePublish(request);
      HandlePublish(request);
      break;
    case Op::kAbandon:
      if (cmd.set) return sets_->HandleAbandon(request);
      HandleAbandon(request);
      break;
    case Op::kCreateSet:
      sets_->HandleCreate(request);
      break;
  }
}

bool CommandApplier::Forwarded(const std::string& raw, const std::string& node) {
  auto forwarded = ParseForwardReply(pipeline_.Command(ForwardCall(
      {opt_.keys.Processing(opt_.node), opt_.keys.NodeQueue(node), opt_.keys.Server(node), raw})));
  if (!forwarded.ok()) {
    Log(LogLevel::kWarn,
        "forwarding a command to node '" + node + "': " + forwarded.status().ToString());
    return false;
  }
  return forwarded.value();
}

Status CommandApplier::MissingStatus(const std::string& name) {
  auto fields = pipeline_.Command({"HMGET", opt_.keys.Tensor(name), "node", "state", "owner"});
  if (!fields.ok()) return fields.status();
  auto entry = table_.find(name);
  if (fields->elements.size() == 3 && !fields->elements[0].is_nil()) {
    const std::string& node = fields->elements[0].str;
    const std::string& state = fields->elements[1].str;
    if (node != opt_.node) {
      return Status(ErrorCode::kWrongNode,
                    "tensor '" + name + "' lives on node '" + node + "', not '" + opt_.node + "'");
    }
    if (state != "ready") {
      return Status(ErrorCode::kNotReady,
                    "tensor '" + name + "' is " + (state.empty() ? "not ready" : state));
    }
    return Status(ErrorCode::kUnavailable, "tensor '" + name + "' belongs to server instance '" +
                                               fields->elements[2].str + "', which is gone");
  }
  if (entry != table_.end()) {
    // Our tensor's hash was removed by hand: nobody can reach the memory any more, but a process
    // may still have it mapped, so it is kept until shutdown.
    Log(LogLevel::kWarn, "the hash of tensor '" + name + "' was removed underneath the server");
    table_.Orphan(table_.Forget(entry));
  }
  return Status(ErrorCode::kNotFound, "no tensor named '" + name + "'");
}

Result<std::optional<Holder>> FillerOf(const Command& cmd) {
  if (!cmd.fill) return std::optional<Holder>();
  if (!cmd.pid_space.empty() && cmd.pid_space != PidSpace()) {
    return Status(ErrorCode::kInvalidArgument,
                  "the filling process runs on another host or in another PID namespace "
                  "than mcd-serve, where its pid names nothing: create the tensor empty "
                  "and write it, or run the filler beside the server");
  }
  // The filler waits for this reply, so its start time read now is its own.
  Holder filler{cmd.pid, ProcessStartTime(cmd.pid), 0};
  if (filler.start == 0) {
    return Status(ErrorCode::kInvalidArgument,
                  "filler process " + std::to_string(cmd.pid) +
                      " is not running on this host (a create with \"fill\" comes from "
                      "the process that writes the bytes)");
  }
  return std::optional<Holder>(filler);
}

Result<std::string> CommandApplier::HolderOf(const Command& cmd) const {
  if (cmd.owner_pid == 0) return std::string();  // bound to nobody
  uint64_t start = cmd.owner_start != 0 ? cmd.owner_start : ProcessStartTime(cmd.owner_pid);
  // A get for a holder that is gone would be given back at once; a delete may still give back
  // one of its references (by its start time).
  if (start == 0 || (cmd.op == Op::kGet && !ProcessAlive(cmd.owner_pid, start))) {
    return Status(ErrorCode::kInvalidArgument,
                  "owner process " + std::to_string(cmd.owner_pid) + " is not running");
  }
  return HolderId(cmd.owner_pid, start);
}

TensorRecord NewRecord(const Command& cmd, const ApplierOptions& opt) {
  TensorRecord record;
  record.name = cmd.name;
  record.dtype = cmd.dtype;
  record.shape = cmd.shape;
  record.device = cmd.device;
  record.bytes = cmd.bytes;
  record.refcount = 1;
  record.state = cmd.fill ? "creating" : "ready";
  record.ctime_ms = NowMs();
  record.node = opt.node;
  record.owner = opt.instance;
  record.lifetime = cmd.lifetime;
  record.creator_pid = cmd.pid;
  if (cmd.lifetime == Lifetime::kStack) {
    record.owner_pid = cmd.owner_pid != 0 ? cmd.owner_pid : cmd.pid;
    record.owner_start =
        cmd.owner_start != 0 ? cmd.owner_start : ProcessStartTime(record.owner_pid);
  }
  return record;
}

void CommandApplier::HandleCreate(Request& request) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  auto fail = [&](const Status& status) {
    responder_.Fail(request, "create", status);
    outcomes_.Record("create", cmd.name, status, t0);
  };
  if (auto copying = copier_.Copying(cmd.name)) {
    // The same command again (resumed from the processing list, or sent again with its req):
    // the copy under way answers it once it ends.
    if (!cmd.req.empty() && *copying == cmd.req) {
      return Log(LogLevel::kDebug,
                 "create of '" + cmd.name + "' again (req " + cmd.req + "): its copy is under way");
    }
    return fail(Status(ErrorCode::kAlreadyExists,
                       "tensor '" + cmd.name + "' is being made already, by a copy under way"));
  }
  if (table_.find(cmd.name) != table_.end()) {
    // Usually a plain "already exists"; if the hash was removed by hand, the name is free again.
    Status missing = MissingStatus(cmd.name);
    if (missing.code() != ErrorCode::kNotFound) {
      return fail(Status(ErrorCode::kAlreadyExists, "tensor '" + cmd.name + "' already exists"));
    }
  }
  if (!devices_.Serves(cmd.device)) {
    return fail(Status(ErrorCode::kNoDevice,
                       "device " + DeviceName(cmd.device) +
                           " is not served here (devices: " + devices_.devices_text() + ")"));
  }
  TensorRecord record = NewRecord(cmd, opt_);
  if (cmd.lifetime == Lifetime::kStack && !ProcessAlive(record.owner_pid, record.owner_start)) {
    return fail(Status(
        ErrorCode::kInvalidArgument,
        "owner process " + std::to_string(record.owner_pid) + " of stack tensor is not running"));
  }
  auto filler = FillerOf(cmd);
  if (!filler.ok()) return fail(filler.status());
  std::optional<NodeCopier::Source> source;
  if (!cmd.copy_of.empty()) {
    auto located = copier_.Locate(cmd);
    if (!located.ok()) return fail(located.status());
    source = std::move(located).value();
  }
  auto allocation = devices_.Allocate(cmd.device, cmd.bytes, cmd.zero_init && !source);
  if (!allocation.ok()) return fail(allocation.status());
  if (!source) {
    return CommitCreate(request, std::move(record), std::move(allocation).value(), *filler, t0);
  }
  // The bytes are in before the hash is written: a failed copy publishes nothing. Other commands
  // are applied meanwhile.
  Allocation memory = allocation.value();
  Command copying = cmd;  // `request`, which holds cmd, moves into the continuation
  copier_.StartFill(copying, *source, memory,
                    [this, request = std::move(request), record = std::move(record), memory,
                     filler = *filler, t0](Status filled) mutable {
                      if (filled.ok())
                        return CommitCreate(request, std::move(record), memory, filler, t0);
                      (void)devices_.Free(record.device, memory);
                      responder_.Fail(request, "create", filled);
                      outcomes_.Record("create", record.name, filled, t0);
                    });
}

void CommandApplier::CommitCreate(Request& request, TensorRecord record, Allocation allocation,
                                  std::optional<Holder> filler, Clock::time_point t0) {
  const Command& cmd = request.parsed.value();
  record.ipc_kind = allocation.ipc_kind;
  record.ipc_handle = allocation.ipc_handle;
  record.offset = allocation.offset;
  Entry entry{record, std::move(allocation), RecordJsonHead(record), filler};
  std::vector<std::string> fields;
  for (auto& [field, value] : HashFields(record)) {
    fields.push_back(field);
    fields.push_back(std::move(value));
  }
  std::string reply = TensorReplyJson(cmd.req, Op::kCreate, entry.json_head, 1);
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply, Pre::kAbsent,
                       CommitChange::Hset(fields),
                       // A tensor being filled is announced when it is published, ready.
                       filler ? CommitEvent{} : CommitEvent{"create", cmd.pid}),
        request,
        [this, t0, entry = std::move(entry)](const Request& made,
                                             Result<CommitResult> committed) mutable {
          CreateCommitted(made, std::move(entry), t0, std::move(committed));
        });
}

void CommandApplier::FinishCopies() {
  // Flushed only when a copy ended: a flush waits for the replies due, which would cost every
  // batch its overlap with the one before.
  if (copier_.FinishCopies() > 0) pipeline_.Flush();
}

void CommandApplier::StopCopies() {
  copier_.StopCopies();
  pipeline_.Flush();
}

void CommandApplier::CreateCommitted(const Request& request, Entry entry, Clock::time_point t0,
                                     Result<CommitResult> committed) {
  const std::string& req = request.req;
  const std::string name = entry.record.name;  // a copy: the entry may move into the table
  if (committed.ok() && committed->kind == CommitResult::kOk) {
    std::string detail = "device=" + DeviceName(entry.record.device) +
                         " bytes=" + std::to_string(entry.record.bytes);
    table_.Keep(std::move(entry));
    outcomes_.Record("create", name, Status::Ok(), t0, detail);
    return;
  }
  if (!committed.ok() && !pipeline_.connected()) {
    // The connection broke: the script may or may not have run. Decided after reconnecting.
    table_.Unsettled(std::move(entry));
    return outcomes_.Record("create", name, committed.status(), t0, "outcome=unknown");
  }
  Status freed = devices_.Free(entry.record.device, entry.allocation);
  if (!freed.ok()) Log(LogLevel::kError, "free after failed create: " + freed.ToString());
  if (!committed.ok()) {
    responder_.Refused(request, "create", committed.status());
    return outcomes_.Record("create", name, committed.status(), t0);
  }
  if (committed->kind == CommitResult::kDup) {
    return outcomes_.Record("create", name, Status::Ok(), t0, "repeated_req=" + req);
  }
  Status exists(ErrorCode::kAlreadyExists,
                "tensor '" + name + "' already exists (made by another server)");
  responder_.AnswerNow(request, "create", exists);
  outcomes_.Record("create", name, exists, t0);
}

void CommandApplier::HandleRefcount(Request& request, int delta) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  const char* op = OpName(cmd.op);
  auto it = table_.find(cmd.name);
  Status status = it == table_.end() ? MissingStatus(cmd.name) : Status::Ok();
  if (!status.ok()) {
    responder_.Fail(request, op, status);
    return outcomes_.Record(op, cmd.name, status, t0);
  }
  if (it->second.filler) {
    Status filling(ErrorCode::kNotReady, "tensor '" + cmd.name + "' is creating: process " +
                                             std::to_string(it->second.filler->pid) +
                                             " is still writing its bytes");
    responder_.Fail(request, op, filling);
    return outcomes_.Record(op, cmd.name, filling, t0);
  }
  auto holder = HolderOf(cmd);
  if (!holder.ok()) {
    responder_.Fail(request, op, holder.status());
    return outcomes_.Record(op, cmd.name, holder.status(), t0);
  }
  // The script writes the reply around the count it makes.
  TensorReplyParts reply = TensorReplyHead(cmd.req, cmd.op, it->second.json_head);
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply.head, Pre::kMine,
                       CommitChange::Incr(holder.value(), delta, reply.held_tail, reply.freed_tail,
                                          cmd.own_only)
                           .Of(it->second.record.set),
                       CommitEvent{"ref", cmd.owner_pid != 0 ? cmd.owner_pid : cmd.pid}),
        request, [this, op, t0](const Request& made, Result<CommitResult> committed) {
          RefcountCommitted(made, op, t0, std::move(committed));
        });
}

Status CommandApplier::FillerCheck(const Entry& entry, const Command& cmd) const {
  if (!entry.filler) {
    return Status(ErrorCode::kInvalidArgument,
                  "tensor '" + cmd.name + "' is " + entry.record.state + ", not being filled");
  }
  if (entry.filler->pid != cmd.pid) {
    return Status(ErrorCode::kInvalidArgument,
                  "tensor '" + cmd.name + "' is being filled by process " +
                      std::to_string(entry.filler->pid) + "; only it may publish or abandon it");
  }
  return Status::Ok();
}

TensorTable::Map::iterator CommandApplier::FillersEntry(const Request& request,
                                                        Clock::time_point t0) {
  const Command& cmd = request.parsed.value();
  auto it = table_.find(cmd.name);
  Status status = it == table_.end() ? MissingStatus(cmd.name) : FillerCheck(it->second, cmd);
  if (status.ok()) return it;
  responder_.Fail(request, OpName(cmd.op), status);
  outcomes_.Record(OpName(cmd.op), cmd.name, status, t0);
  return table_.end();
}

void CommandApplier::HandlePublish(Request& request) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  auto it = FillersEntry(request, t0);
  if (it == table_.end()) return;
  TensorRecord ready = it->second.record;
  ready.state = "ready";
  // Nobody can take or give back a reference of a tensor being filled: its count is still the
  // creator's 1.
  std::string reply = TensorReplyJson(cmd.req, Op::kPublish, RecordJsonHead(ready), 1);
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply, Pre::kCreating,
                       CommitChange::Hset({"state", "ready"}), CommitEvent{"create", cmd.pid}),
        request, [this, t0](const Request& made, Result<CommitResult> committed) {
          PublishCommitted(made, t0, std::move(committed));
        });
}

void CommandApplier::PublishCommitted(const Request& request, Clock::time_point t0,
                                      Result<CommitResult> committed) {
  const std::string& name = request.parsed->name;
  if (committed.ok() && committed->kind == CommitResult::kOk) {
    if (auto found = table_.find(name); found != table_.end()) table_.Published(found);
    return outcomes_.Record("publish", name, Status::Ok(), t0);
  }
  if (!committed.ok()) {
    // A publish that Redis may have applied is found out by resettle, before the next.
    responder_.Refused(request, "publish", committed.status());
    return outcomes_.Record("publish", name, committed.status(), t0);
  }
  if (committed->kind == CommitResult::kDup) {
    return outcomes_.Record("publish", name, Status::Ok(), t0, "repeated_req=" + request.req);
  }
  Status missing = MissingStatus(name);
  responder_.AnswerNow(request, "publish", missing);
  outcomes_.Record("publish", name, missing, t0);
}

void CommandApplier::HandleAbandon(Request& request) {
  auto t0 = Clock::now();
  const Command& cmd = request.parsed.value();
  auto it = FillersEntry(request, t0);
  if (it == table_.end()) return;
  std::string reply = TensorReplyJson(cmd.req, Op::kAbandon, it->second.json_head, 0);
  // Never announced, so no event: the stream names a tensor from its publish on.
  Queue(pipeline_.Make(request.route, request.raw, cmd.req, cmd.name, reply, Pre::kCreating,
                       CommitChange::Del().Of(it->second.record.set), CommitEvent{}),
        request, [this, t0](const Request& made, Result<CommitResult> committed) {
          const std::string& name = made.parsed->name;
          if (committed.ok() && committed->kind == CommitResult::kOk) {
            auto found = table_.find(name);
            if (found == table_.end()) return;
            Entry entry = table_.Forget(found);
            Status freed = devices_.Free(entry.record.device, entry.allocation);
            return outcomes_.Record("abandon", name, freed, t0,
                                    "freed=" + std::to_string(entry.record.bytes));
          }
          RefcountCommitted(made, "abandon", t0, std::move(committed));
        });
}

void CommandApplier::RefcountCommitted(const Request& request, const char* op, Clock::time_point t0,
                                       Result<CommitResult> committed) {
  const std::string& name = request.parsed->name;
  const std::string& req = request.req;
  if (!committed.ok()) {
    // The connection broke: the commit may have removed the hash. Decided after reconnecting.
    if (!pipeline_.connected() && std::string_view(op) == "delete") table_.MaybeDeleted(name);
    responder_.Refused(request, op, committed.status());
    return outcomes_.Record(op, name, committed.status(), t0);
  }
  if (committed->kind == CommitResult::kDup) {
    return outcomes_.Record(op, name, Status::Ok(), t0, "repeated_req=" + req);
  }
  if (committed->kind == CommitResult::kNotHeld) {
    const Command& cmd = request.parsed.value();
    Status not_held = NotHeldStatus(name, cmd.own_only         ? NotHeldFor::kTaken
                                          : cmd.owner_pid == 0 ? NotHeldFor::kUnbound
                                                               : NotHeldFor::kAny);
    responder_.AnswerNow(request, op, not_held);
    return outcomes_.Record(op, name, not_held, t0);
  }
  if (committed->kind == CommitResult::kOk) {
    if (committed->refcount > 0) {
      return outcomes_.Record(op, name, Status::Ok(), t0,
                              "refcount=" + std::to_string(committed->refcount));
    }
    auto found = table_.find(name);
    if (found == table_.end()) return outcomes_.Record(op, name, Status::Ok(), t0, "freed=0");
    Entry entry = table_.Forget(found);
    // The reply is out and the hash gone: the worker frees the memory while this thread goes on
    // with the next commands. The outcome, a failed post included, reaches the callback.
    (void)devices_.Free(
        entry.record.device, entry.allocation,
        [outcomes = &outcomes_, op, name, t0, bytes = entry.record.bytes](const Status& freed) {
          outcomes->Record(op, name, freed, t0, "freed=" + std::to_string(bytes));
        });
    return;
  }
  // The hash is gone or not ready (changed by hand): say which.
  Status missing = MissingStatus(name);
  responder_.AnswerNow(request, op, missing);
  outcomes_.Record(op, name, missing, t0);
}

}  // namespace mcd
