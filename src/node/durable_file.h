// Replacing a file so that a crash or a full disk leaves either the old text or the new,
// never a torn or empty file: write a temporary file beside it, fsync it, rename it over
// the file, fsync the directory. Used for the allocation snapshot and the CDI spec.
//
// Thread-safe for different paths. Cost: two fsyncs (milliseconds on a disk).
#pragma once

#include <sys/types.h>

#include <string>

#include "src/common/status.h"

namespace gs::node {

// Replaces `path` with `text` (mode for a new file). On an error (named, with its path)
// the old file is untouched and no temporary file is left.
Status WriteFileDurably(const std::string& path, const std::string& text, mode_t mode = 0644);

}  // namespace gs::node
