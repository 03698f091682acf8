#include "src/common/robust_mutex.h"

#include <cerrno>

namespace gs {

void InitRobustMutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
}

bool LockRobust(pthread_mutex_t* m) {
  return pthread_mutex_lock(m) == EOWNERDEAD;
}

void MarkConsistent(pthread_mutex_t* m) {
  pthread_mutex_consistent(m);
}

}  // namespace gs
