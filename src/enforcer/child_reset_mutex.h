// A process-private mutex that a forked child re-initialises (ResetInChild, from a child
// fork handler) rather than finding it held by a thread of its parent that did not come
// along. For the enforcer's locks that are held across driver or NVML calls and guard only
// what a child forgets or rebuilds: taking them in a prepare handler instead would make
// every fork wait for those calls, and deadlock should the driver's own fork handler hold
// what such a call waits for.
#pragma once

#include <pthread.h>

namespace gs::enforcer {

class ChildResetMutex {
 public:
  constexpr ChildResetMutex() = default;
  ChildResetMutex(const ChildResetMutex&) = delete;
  ChildResetMutex& operator=(const ChildResetMutex&) = delete;

  void lock() { pthread_mutex_lock(&mu_); }
  void unlock() { pthread_mutex_unlock(&mu_); }
  // In a forked child only, before any use there.
  void ResetInChild() { pthread_mutex_init(&mu_, nullptr); }

 private:
  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
};

}  // namespace gs::enforcer
