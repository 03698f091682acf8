// Robust, process-shared mutexes for state in shared memory (the simulator's node state,
// the enforcer's regions): a process that dies holding one does not wedge the others.
// LockRobust reports EOWNERDEAD so the caller can repair its invariants before
// MarkConsistent. Allocation-free; safe in injected libraries.
#pragma once

#include <pthread.h>

namespace gs {

void InitRobustMutex(pthread_mutex_t* m);

// Locks m. Returns true when the previous owner died holding it: the protected data may
// be half-updated; repair it, then call MarkConsistent(m).
bool LockRobust(pthread_mutex_t* m);
void MarkConsistent(pthread_mutex_t* m);

}  // namespace gs
