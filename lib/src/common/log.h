// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// One-line log records on stderr: "2026-11-22T03:04:05.123Z mcd-serve[123] info: ...", the
// message with every byte outside printable ASCII shown as \xNN and a backslash as \\. When
// stderr is the journal's stream (JOURNAL_STREAM names it, as systemd sets it for a service),
// "<3>..." to "<7>...": the message with its syslog priority as sd-daemon(3) prefixes it, the
// time, name and pid left to journald.
#pragma once

#include <string>

namespace mcd {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
void SetLogTag(const std::string& tag);  // program name shown in each line
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);
// Whether stderr is the journal's stream, as systemd connects a service's (JOURNAL_STREAM).
bool StderrIsJournal();

}  // namespace mcd
