// One-line log records on stderr: "2026-11-22T03:04:05.123Z mcd-serve[123] info: ...", the
// message with every byte outside printable ASCII shown as \xNN and a backslash as \\.
#pragma once

#include <string>

namespace mcd {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
void SetLogTag(const std::string& tag);  // program name shown in each line
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string& message);

}  // namespace mcd
