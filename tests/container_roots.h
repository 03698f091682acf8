// Root file systems for the tests that drive real container runtimes (runc, podman,
// dockerd): assembled from the host's busybox and the built programs with the shared
// libraries they load, so no registry or mirror is needed.
#pragma once

#include <string>

namespace gs::testing {

// Whether `tool` is on PATH.
bool Have(const char* tool);

// A busybox root file system in `r` (static: no dynamic loader).
void BusyboxRootfs(const std::string& r);

// Copies the program `bin` into root `r` as `dest`, with every library ldd finds for it at
// its host path (libcuda is the node's: it comes from CDI or the hook). `strip_debug`
// drops the program's debug sections (an image copied per container stays small).
void CopyProgram(const std::string& r, const std::string& bin, const std::string& dest, bool strip_debug = false);

// A glibc root: busybox plus cuda_probe as /bin/cuda_probe (the real ld.so, which honours
// /etc/ld.so.preload).
void GlibcRootfs(const std::string& r);

}  // namespace gs::testing
