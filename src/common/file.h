// Reading a whole file into a string, for daemons, commands and tests (not for the
// injected libraries: it allocates). Files of any size, /proc files (which report size 0)
// included; binary-safe.
#pragma once

#include <string>

#include "src/common/status.h"

namespace gs {

// The bytes of the file at `path`, read to its end. NotFound when it or a directory on its
// path does not exist; FailedPrecondition for any other failure (no permission, a
// directory, a read error). The message is "<path>: <the system's reason>".
StatusOr<std::string> ReadFile(const std::string& path);

// The bytes from the descriptor's position to its end, with the same errors as ReadFile
// naming `path`. `size_hint` (the file's size, when known) sizes the first read.
StatusOr<std::string> ReadToEnd(int fd, const std::string& path, size_t size_hint = 0);

}  // namespace gs
