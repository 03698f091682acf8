// Test helper: runs the node agent's host-pid resolver on a region and prints each live
// slot as "pid P host_pid H".
#include <cstdio>

#include "src/node/host_pids.h"
#include "src/region/region.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  gs::node::ResolveHostPids({argv[1]});
  gs::region::OpenError err;
  char msg[256];
  gs::region::Region* r = gs::region::OpenRegionReadOnly(argv[1], &err, msg, sizeof(msg));
  if (r == nullptr) {
    fprintf(stderr, "%s\n", msg);
    return 1;
  }
  for (const auto& s : r->procs)
    if (s.pid.load()) printf("pid %u host_pid %u\n", s.pid.load(), s.host_pid.load());
  return 0;
}
