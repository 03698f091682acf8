// `gpuslice hook`: an OCI prestart / createRuntime hook (the container state JSON on
// stdin; src/container/oci_hook.h does the work). Refusals go to stderr (runc shows it only
// when the hook fails) and, with --log FILE, are appended there.
#pragma once

#include <string>
#include <vector>

namespace gs::cli {

int HookCommand(const std::vector<std::string>& args);

}  // namespace gs::cli
