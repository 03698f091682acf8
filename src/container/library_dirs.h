// Where the driver's libraries go inside a container. The host's library directory is
// not always one the image's dynamic loader searches: a RHEL host keeps them in
// /usr/lib64, which a Debian image's loader never looks at, and the other way round.
// Nothing is run in the container to fix that up (no ldconfig, no hook binary from the
// image): the libraries are mounted where the image's own loader already looks.
#pragma once

#include <string>
#include <vector>

#include "src/container/rootfs.h"
#include "src/model/container_edits.h"

namespace gs::container {

// The loader's default directories of the two glibc image families: Debian/Ubuntu's
// multiarch directory and RHEL/Fedora/SUSE's lib64. A CDI spec is written before any
// image is known, so it mounts the libraries into both.
std::vector<std::string> DefaultImageLibraryDirs();

// The directory of the image's own libc.so.6 (reached without links): its loader searches
// it by default. "" when the image has no glibc (static or musl images).
std::string ImageLibraryDir(const RootFs& root);

// Moves every driver library mount of `edits` (Mount::library) to each of `dirs`, keeping
// the file names; other mounts are unchanged. Empty `dirs`: the libraries stay at the
// host's path.
void PlaceLibraries(model::ContainerEdits* edits, const std::vector<std::string>& dirs);

}  // namespace gs::container
