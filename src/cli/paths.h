// Where gpuslice's own files are, found from the running executable so the build tree
// and an installed tree both work without configuration:
//   build tree:  build/<preset>/bin/gpuslice, build/<preset>/sim/lib/, .../enforcer/
//   installed:   <prefix>/bin/gpuslice, <prefix>/lib/gpuslice/{sim,enforcer}/
#pragma once

#include <string>

namespace gs::cli {

std::string SelfExecutable();
// Directory with the simulator's libcuda.so.1 and libnvidia-ml.so.1 ($GPUSLICE_SIM_LIB_DIR wins).
std::string SimLibraryDir();
// Path of libgpuslice.so ($GPUSLICE_ENFORCER wins).
std::string EnforcerLibrary();

}  // namespace gs::cli
