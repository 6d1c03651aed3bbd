// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Runs a program under a system-call allow-list, as systemd's SystemCallFilter= does for
// mcd-serve.service (with SystemCallErrorNumber=EPERM and NoNewPrivileges=yes), so that a test
// can run the server inside its unit's filter where no systemd runs. The list is the unit's,
// expanded by scripts/systemd/unit-syscalls.sh from systemd's own groups.
//   syscall_sandbox ALLOWED_FILE [--user USER --group GROUP] [--deny-write-execute] -- PROGRAM ...
// With --user/--group (root only), it becomes that user, in that group only, first: the unit's
// User= and Group=. --deny-write-execute adds MemoryDenyWriteExecute='s rules, as systemd
// writes them: no mapping both writable and executable, no memory made executable later.
// libseccomp builds the filter; only the option parsing is written here.
#include <grp.h>
#include <pwd.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: syscall_sandbox ALLOWED_FILE [--user USER --group GROUP] "
               "[--deny-write-execute] -- PROGRAM ...\n");
  return 64;
}

// Becomes `user` in `group` (and that group alone); before the filter, which denies setuid.
bool BecomeUser(const char* user, const char* group) {
  const passwd* pw = getpwnam(user);
  const struct group* gr = getgrnam(group);
  if (pw == nullptr || gr == nullptr) {
    std::fprintf(stderr, "syscall_sandbox: no user '%s' or group '%s'\n", user, group);
    return false;
  }
  gid_t gid = gr->gr_gid;
  if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(pw->pw_uid) != 0) {
    std::perror("syscall_sandbox: becoming the unit's user");
    return false;
  }
  return true;
}

// MemoryDenyWriteExecute=, as systemd's seccomp_memory_deny_write_execute: mmap of memory
// both writable and executable, mprotect/pkey_mprotect to executable, and shmat with SHM_EXEC
// fail with EPERM; the same calls otherwise pass. Allowed here case by case (the default action
// refuses the rest), so that no unconditional rule of the list allows them.
bool AddDenyWriteExecute(scmp_filter_ctx filter) {
  const scmp_datum_t wx = PROT_WRITE | PROT_EXEC;
  bool ok = true;
  for (scmp_datum_t prot : {scmp_datum_t{0}, scmp_datum_t{PROT_WRITE}, scmp_datum_t{PROT_EXEC}})
    ok = ok && seccomp_rule_add(filter, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
                                SCMP_A2(SCMP_CMP_MASKED_EQ, wx, prot)) == 0;
  for (int call : {SCMP_SYS(mprotect), SCMP_SYS(pkey_mprotect)})
    ok = ok && seccomp_rule_add(filter, SCMP_ACT_ALLOW, call, 1,
                                SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)) == 0;
  return ok && seccomp_rule_add(filter, SCMP_ACT_ALLOW, SCMP_SYS(shmat), 1,
                                SCMP_A2(SCMP_CMP_MASKED_EQ, SHM_EXEC, 0)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return Usage();
  int at = 2;
  const char* user = nullptr;
  const char* group = nullptr;
  bool deny_write_execute = false;
  for (; at < argc && std::strcmp(argv[at], "--") != 0; at += 2) {
    if (std::strcmp(argv[at], "--deny-write-execute") == 0) {
      deny_write_execute = true;
      --at;  // a flag: no value
      continue;
    }
    if (at + 1 >= argc) return Usage();
    if (std::strcmp(argv[at], "--user") == 0) {
      user = argv[at + 1];
    } else if (std::strcmp(argv[at], "--group") == 0) {
      group = argv[at + 1];
    } else {
      return Usage();
    }
  }
  if (at + 1 >= argc || (user == nullptr) != (group == nullptr)) return Usage();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    std::perror("syscall_sandbox: PR_SET_NO_NEW_PRIVS");
    return 70;
  }
  scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (filter == nullptr) return 70;
  std::ifstream list(argv[1]);  // read as the caller, before becoming the unit's user
  std::vector<std::string> names;
  for (std::string name; std::getline(list, name);) names.push_back(name);
  if (user != nullptr && !BecomeUser(user, group)) return 70;
  int allowed = 0;
  const std::string guarded[] = {"mmap", "mprotect", "pkey_mprotect", "shmat"};
  for (const std::string& name : names) {
    int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // a name this architecture does not have
    if (deny_write_execute &&
        std::find(std::begin(guarded), std::end(guarded), name) != std::end(guarded))
      continue;  // allowed with conditions below
    if (seccomp_rule_add(filter, SCMP_ACT_ALLOW, nr, 0) == 0) ++allowed;
  }
  if (deny_write_execute && !AddDenyWriteExecute(filter)) {
    std::fprintf(stderr, "syscall_sandbox: the MemoryDenyWriteExecute rules were refused\n");
    return 70;
  }
  if (allowed == 0) {
    std::fprintf(stderr, "syscall_sandbox: no system call allowed by %s\n", argv[1]);
    return 64;
  }
  if (seccomp_load(filter) != 0) {
    std::fprintf(stderr, "syscall_sandbox: seccomp_load failed\n");
    return 70;
  }
  execvp(argv[at + 1], argv + at + 1);
  std::perror("syscall_sandbox: exec");
  return 126;
}
