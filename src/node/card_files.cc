#include "src/node/card_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "src/region/card.h"

namespace gs::node {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + strerror(errno));
}

Status PrepareCardFile(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // Not ours (a link or directory left by an older version whose cards directory was
    // writable by containers): replace it with a real card file.
    if (unlink(path.c_str()) != 0 && rmdir(path.c_str()) != 0) return Errno("cannot remove", path);
  }
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) return Errno("cannot create card region", path);
  Status s = Status::Ok();
  if (fchmod(fd, 0666) != 0) s = Errno("cannot make shared the card region", path);
  // Grows a new (or short) file with zeros; an initialised card keeps its contents.
  if (int e = posix_fallocate(fd, 0, sizeof(region::Card)); s.ok() && e != 0) {
    errno = e;
    s = Errno("cannot allocate card region", path);
  }
  close(fd);
  return s;
}

}  // namespace

bool UsableCardFileName(const std::string& uuid) {
  // Not a hidden name either (".", ".." and the roster directory's ".lock" are not cards),
  // nor one a roster's temporary file takes ("<uuid>.new").
  return !uuid.empty() && uuid[0] != '.' && uuid.find('/') == std::string::npos && !uuid.ends_with(".new");
}

Status PrepareCardFiles(const std::string& dir, const std::vector<model::Gpu>& gpus) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("cannot create", dir);
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0) return Errno("cannot inspect", dir);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(dir + " is not a directory");
  // Whatever the umask or an older version left: containers may use the files, not add any.
  if ((st.st_mode & 07777) != 0755 && chmod(dir.c_str(), 0755) != 0) return Errno("cannot set the mode of", dir);
  for (const auto& g : gpus) {
    if (!UsableCardFileName(g.uuid)) return InvalidArgument("GPU UUID '" + g.uuid + "' cannot name a card region file");
    GS_RETURN_IF_ERROR(PrepareCardFile(dir + "/" + g.uuid));
  }
  return Status::Ok();
}

}  // namespace gs::node
