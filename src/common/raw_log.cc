#include "src/common/raw_log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>

namespace gs {
namespace {
const char* g_prefix = "gpuslice";
std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDetail:
      return "detail";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}
}  // namespace

void SetRawLogPrefix(const char* prefix) {
  g_prefix = prefix;
}
void SetRawLogLevel(int level) {
  g_level.store(level, std::memory_order_relaxed);
}
int RawLogLevel() {
  return g_level.load(std::memory_order_relaxed);
}

void RawLog(LogLevel level, const char* fmt, ...) {
  int saved_errno = errno;  // a hook must not disturb the caller's errno
  char buf[1024];
  int n = snprintf(buf, sizeof(buf), "%s: %s: ", g_prefix, LevelName(level));
  if (n < 0) n = 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  buf[len++] = '\n';
  ssize_t unused = write(STDERR_FILENO, buf, len);
  (void)unused;
  errno = saved_errno;
}

}  // namespace gs
