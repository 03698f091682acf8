// Logging that is safe inside any hook: formats into a stack buffer and calls write(2).
//
// Used by the two injected libraries (enforcer, simulator) and by tools that want the
// same prefix. No locks, no allocation, no stdio; one write(2) per line so lines from
// several threads or processes do not interleave. Thread-safe.
#pragma once

namespace gs {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDetail = 3, kDebug = 4 };

// Process-wide settings, set once at library init (before threads exist).
void SetRawLogPrefix(const char* prefix);  // e.g. "gpuslice"; the pointer must outlive use
void SetRawLogLevel(int level);            // messages above it are dropped
int RawLogLevel();

// printf-style; appends a newline.
void RawLog(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gs

#define GS_LOG(level, ...)                                              \
  do {                                                                  \
    if (static_cast<int>(::gs::LogLevel::level) <= ::gs::RawLogLevel()) \
      ::gs::RawLog(::gs::LogLevel::level, __VA_ARGS__);                 \
  } while (0)
