// A descriptor sent with a message over a unix socket (SCM_RIGHTS). Allocation-free.
#pragma once

#include <cstddef>

namespace gs {

// Sends `size` bytes on `sock` with `fd` attached (none when fd < 0). True when every byte
// went; never raises SIGPIPE.
bool SendWithDescriptor(int sock, const void* bytes, size_t size, int fd, bool dont_wait = false);

// Receives exactly `size` bytes from `sock` and the descriptor attached to them, if any
// (`*fd`: -1 when none; close-on-exec). False on a short read, EOF or error, with no
// descriptor left open.
bool ReceiveWithDescriptor(int sock, void* bytes, size_t size, int* fd);

}  // namespace gs
