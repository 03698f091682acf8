#include "src/node/card_entries.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "src/common/file.h"
#include "src/node/card_files.h"
#include "src/region/card.h"

namespace gs::node {
namespace {

struct Assignment {
  int entry = -1;
  int64_t at = 0;  // unix seconds when it was handed out (for whoever reads the roster)
  std::string owner;
};

Status Errno(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + strerror(errno));
}

bool Stands(const Assignment& a) {
  struct stat st;
  return stat(a.owner.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The assignments of a roster file that still stand; a line that does not parse, an entry
// out of range or given twice is dropped (the file is the host's own, but a roster that
// lost a line only frees an entry).
std::vector<Assignment> Read(const std::string& path) {
  std::vector<Assignment> out;
  auto text = ReadFile(path);
  if (!text.ok()) return out;
  bool taken[region::kCardTenants] = {};
  std::istringstream lines(*text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    Assignment a;
    if (!(fields >> a.entry >> a.at) || a.entry < 0 || a.entry >= region::kCardTenants || taken[a.entry]) continue;
    std::getline(fields >> std::ws, a.owner);
    if (a.owner.empty() || a.owner[0] != '/' || !Stands(a)) continue;
    taken[a.entry] = true;
    out.push_back(std::move(a));
  }
  return out;
}

Status Write(const std::string& path, const std::vector<Assignment>& roster) {
  std::string text;
  for (const auto& a : roster) text += std::to_string(a.entry) + " " + std::to_string(a.at) + " " + a.owner + "\n";
  std::string tmp = path + ".new";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot write", tmp);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) return Errno("cannot write", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot replace", path);
  return Status::Ok();
}

// Holds the roster directory's lock for its lifetime.
class RosterLock {
 public:
  explicit RosterLock(const std::string& dir)
      : fd_(open((dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RosterLock() {
    if (fd_ >= 0) close(fd_);
  }
  RosterLock(const RosterLock&) = delete;
  RosterLock& operator=(const RosterLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace

std::string CardEntriesDir(const std::string& cards_dir) {
  std::string dir = cards_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  size_t slash = dir.rfind('/');
  std::string parent = slash == std::string::npos ? "." : dir.substr(0, slash);
  return parent + "/card-entries";
}

StatusOr<std::vector<int>> AssignCardEntries(const std::string& cards_dir, const std::vector<std::string>& uuids,
                                             const std::string& owner, int64_t now_seconds) {
  if (owner.empty() || owner[0] != '/' || owner.find('\n') != std::string::npos)
    return InvalidArgument("card entry owner '" + owner + "' is not an absolute path");
  struct stat st;
  if (stat(owner.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return FailedPrecondition("card entry owner " + owner + " is not a directory");
  const std::string dir = CardEntriesDir(cards_dir);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return Errno("cannot create", dir);
  RosterLock lock(dir);
  if (!lock.held()) return Errno("cannot lock", dir + "/.lock");
  std::vector<int> entries;
  for (const auto& uuid : uuids) {
    if (!UsableCardFileName(uuid)) return InvalidArgument("GPU UUID '" + uuid + "' cannot name a card roster file");
    const std::string path = dir + "/" + uuid;
    std::vector<Assignment> roster = Read(path);
    int entry = -1;
    bool taken[region::kCardTenants] = {};
    for (const auto& a : roster) {
      taken[a.entry] = true;
      if (a.owner == owner) entry = a.entry;
    }
    for (int i = 0; entry < 0 && i < region::kCardTenants; ++i)
      if (!taken[i]) {
        entry = i;
        roster.push_back({i, now_seconds, owner});
      }
    GS_RETURN_IF_ERROR(Write(path, roster));
    entries.push_back(entry);
  }
  return entries;
}

Status TakeCardEntries(const std::string& cards_dir, const std::string& owner, int64_t now_seconds,
                       model::Allocation* a) {
  std::vector<model::DeviceGrant*> shared;
  std::vector<std::string> uuids;
  for (auto& d : a->devices)
    if (d.sm_share > 0 && d.sm_share < 100 && !d.uuid.empty()) {
      shared.push_back(&d);
      uuids.push_back(d.uuid);
    }
  if (cards_dir.empty() || shared.empty()) return Status::Ok();
  GS_ASSIGN_OR_RETURN(std::vector<int> entries, AssignCardEntries(cards_dir, uuids, owner, now_seconds));
  for (size_t i = 0; i < shared.size(); ++i) shared[i]->card_entry = entries[i];
  return Status::Ok();
}

std::vector<int> CardEntriesOf(const std::string& cards_dir, const std::string& uuid, const std::string& owner) {
  std::vector<int> out;
  for (const auto& a : Read(CardEntriesDir(cards_dir) + "/" + uuid))
    if (a.owner == owner) out.push_back(a.entry);
  return out;
}

}  // namespace gs::node
