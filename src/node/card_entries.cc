#include "src/node/card_entries.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <string_view>

#include "src/common/file.h"
#include "src/node/card_files.h"
#include "src/region/card.h"

namespace gs::node {
namespace {

// A line of a roster. `owner` views the roster's text (or the caller's owner), which must
// outlive it.
struct Assignment {
  int entry = -1;
  int64_t at = 0;  // unix seconds when it was handed out (for whoever reads the roster)
  std::string_view owner;
};

// A roster file is kCardTenants slots of kSlotBytes, slot i holding entry i's line (blank
// when never used), so handing out an entry writes its slot in place: no new inode and no
// rename on the Allocate path (on ext4 a rename over a freshly written file starts its
// writeback, ~0.3 ms of the agent's Allocate). The padding goes between the time and the
// owner, so the line reads "<entry> <time> <owner>" to any reader that splits on
// whitespace, older gpuslice versions included. A slot is 256-byte aligned: a crash
// mid-write tears that slot's line alone, and its entry is free unless the torn text
// happens to name an existing directory.
constexpr size_t kSlotBytes = 256;
constexpr size_t kRosterBytes = kSlotBytes * region::kCardTenants;
// "<entry> <unix seconds> <owner>\n" in a slot: 2 + 1 + 20 + 1 + owner + 1 bytes.
constexpr size_t kMaxOwnerBytes = kSlotBytes - 25;

Status Errno(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + strerror(errno));
}

// Whether assignments stand (their owner is a directory). Owners share a parent directory
// (the agent's or the hook's state), which is looked up once: a roster read asks about up to
// 64 owners, and a whole path's lookup each is most of an Allocate's time in the agent.
class OwnerCheck {
 public:
  static bool IsDirectory(std::string_view path) {
    struct stat st;
    return stat(std::string(path).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  OwnerCheck() = default;
  ~OwnerCheck() {
    if (parent_fd_ >= 0) close(parent_fd_);
  }
  OwnerCheck(const OwnerCheck&) = delete;
  OwnerCheck& operator=(const OwnerCheck&) = delete;

  bool Stands(const Assignment& a) {
    const std::string_view owner = a.owner;
    const size_t slash = owner.rfind('/');
    if (slash == 0 || slash == std::string_view::npos || slash + 1 == owner.size()) return IsDirectory(owner);
    if (owner.substr(0, slash) != parent_) {
      if (parent_fd_ >= 0) close(parent_fd_);
      parent_ = owner.substr(0, slash);
      parent_fd_ = open(parent_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      parent_gone_ = parent_fd_ < 0 && (errno == ENOENT || errno == ENOTDIR);
    }
    if (parent_fd_ < 0)  // gone, or not opened (no descriptor left): the whole path then
      return !parent_gone_ && IsDirectory(owner);
    const std::string_view name = owner.substr(slash + 1);
    char z[NAME_MAX + 1];
    if (name.size() > NAME_MAX) return false;  // no such name can exist
    memcpy(z, name.data(), name.size());
    z[name.size()] = '\0';
    struct stat st;
    return fstatat(parent_fd_, z, &st, 0) == 0 && S_ISDIR(st.st_mode);
  }

 private:
  std::string parent_;
  int parent_fd_ = -1;
  bool parent_gone_ = false;
};

// Eight spaces at a time first: a slot is mostly padding (a blank slot all of it).
void SkipBlanks(std::string_view* rest) {
  constexpr uint64_t kSpaces = 0x2020202020202020ULL;
  size_t i = 0;
  for (uint64_t word; i + sizeof(word) <= rest->size(); i += sizeof(word)) {
    memcpy(&word, rest->data() + i, sizeof(word));
    if (word != kSpaces) break;
  }
  while (i < rest->size() && ((*rest)[i] == ' ' || (*rest)[i] == '\t')) ++i;
  rest->remove_prefix(i);
}

// One number of a line and the blanks after it; false when there is none.
bool TakeNumber(std::string_view* rest, int64_t* v) {
  auto [end, ec] = std::from_chars(rest->data(), rest->data() + rest->size(), *v);
  if (ec != std::errc() || end == rest->data()) return false;
  rest->remove_prefix(static_cast<size_t>(end - rest->data()));
  SkipBlanks(rest);
  return true;
}

// The assignments a roster's text names, whether their owners stand or not (a stat per
// owner is the cost of a roster read: AssignOne asks only as far as it needs). A line that
// does not parse or names an entry out of range is dropped (the file is the host's own, but
// a roster that lost a line only frees an entry). Reads the slot layout and plain lines alike.
std::vector<Assignment> Lines(std::string_view text) {
  std::vector<Assignment> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    SkipBlanks(&line);
    int64_t entry = -1;
    Assignment a;
    if (!TakeNumber(&line, &entry) || entry < 0 || entry >= region::kCardTenants || !TakeNumber(&line, &a.at)) continue;
    a.owner = line;
    if (a.owner.empty() || a.owner[0] != '/') continue;
    a.entry = static_cast<int>(entry);
    out.push_back(a);
  }
  return out;
}

// The assignments of `lines` that still stand, at most one per entry (the first line of it
// whose owner stands).
std::vector<Assignment> Standing(const std::vector<Assignment>& lines) {
  std::vector<Assignment> out;
  bool taken[region::kCardTenants] = {};
  OwnerCheck check;
  for (const auto& a : lines)
    if (!taken[a.entry] && check.Stands(a)) {
      taken[a.entry] = true;
      out.push_back(a);
    }
  return out;
}

// True when `text` is in slots: its size, every slot one line ending at the slot's end,
// and each slot blank or starting with its own entry number.
bool InSlots(std::string_view text) {
  if (text.size() != kRosterBytes) return false;
  for (size_t i = 0; i < region::kCardTenants; ++i) {
    const size_t at = i * kSlotBytes;
    if (text.find('\n', at) != at + kSlotBytes - 1) return false;
    if (text[at] == ' ') continue;
    size_t number = 0;
    auto [end, ec] = std::from_chars(text.data() + at, text.data() + at + kSlotBytes, number);
    if (ec != std::errc() || number != i || *end != ' ') return false;
  }
  return true;
}

// Entry a's slot; the owner must fit (kMaxOwnerBytes).
std::string Slot(const Assignment& a) {
  std::string slot = std::to_string(a.entry) + " " + std::to_string(a.at) + " ";
  slot.append(kSlotBytes - 1 - slot.size() - a.owner.size(), ' ');
  slot.append(a.owner);
  slot += '\n';
  return slot;
}

// The whole roster through a file beside it renamed over it, so it is never torn: in slots
// (a card's first assignment, or plain lines made slots), or as plain lines when an owner
// recorded by an older version is too long for a slot (cut short, it would name another
// path and its entry would be handed out again).
Status WriteRoster(const std::string& path, const std::vector<Assignment>& roster) {
  bool fits = true;
  for (const auto& a : roster) fits &= a.owner.size() <= kMaxOwnerBytes;
  std::string text;
  if (fits) {
    text.assign(kRosterBytes, ' ');
    for (size_t i = 1; i <= region::kCardTenants; ++i) text[i * kSlotBytes - 1] = '\n';
    for (const auto& a : roster) text.replace(static_cast<size_t>(a.entry) * kSlotBytes, kSlotBytes, Slot(a));
  } else {
    for (const auto& a : roster) {
      text += std::to_string(a.entry) + " " + std::to_string(a.at) + " ";
      text.append(a.owner);
      text += '\n';
    }
  }
  std::string tmp = path + ".new";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot write", tmp);
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!ok) return Errno("cannot write", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot replace", path);
  return Status::Ok();
}

// Holds the roster directory's lock for its lifetime; with `make_dir`, makes the directory
// when it does not exist yet.
class RosterLock {
 public:
  RosterLock(const std::string& dir, bool make_dir) : fd_(Open(dir)) {
    if (fd_ < 0 && errno == ENOENT && make_dir) {
      if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        status_ = Errno("cannot create", dir);
        return;
      }
      fd_ = Open(dir);
    }
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
    if (fd_ < 0) status_ = Errno("cannot lock", dir + "/.lock");
  }
  ~RosterLock() {
    if (fd_ >= 0) close(fd_);
  }
  RosterLock(const RosterLock&) = delete;
  RosterLock& operator=(const RosterLock&) = delete;
  // Ok when held, else what failed.
  const Status& status() const { return status_; }

 private:
  static int Open(const std::string& dir) { return open((dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); }
  int fd_;
  Status status_;
};

// A roster file, open for reading and, where it can be, for writing its slots in place: a
// regular file the caller may write. Anything else (a link, a file it may only read) is
// read where it leads, and is replaced whole by the next assignment rather than written
// through. No descriptor and no text when it does not exist yet, or is no regular file (a
// link to a pipe, a device or a directory, a loop of links: no entries are in it).
class RosterFile {
 public:
  enum class Use { kRead, kAssign };
  RosterFile(const std::string& path, Use use) : path_(path) {
    // O_NONBLOCK: a link to a pipe must not hold the roster lock waiting for a writer.
    if (use == Use::kAssign) fd_ = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    in_place_ = fd_ >= 0;
    if (fd_ < 0 && (use == Use::kRead || errno == ELOOP || errno == EACCES || errno == EROFS))
      fd_ = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    open_errno_ = fd_ < 0 ? errno : 0;
    struct stat st;
    if (fd_ >= 0 && (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))) {
      close(fd_);
      fd_ = -1;
      in_place_ = false;
      open_errno_ = ENOENT;
    }
    if (fd_ >= 0) size_ = static_cast<size_t>(st.st_size);
    if (open_errno_ == ELOOP) open_errno_ = ENOENT;
  }
  ~RosterFile() {
    if (fd_ >= 0) close(fd_);
  }
  RosterFile(const RosterFile&) = delete;
  RosterFile& operator=(const RosterFile&) = delete;

  // Whether a slot may be written through it (else the roster is replaced whole).
  bool in_place() const { return in_place_; }

  // Its text, read to its end ("" when it does not exist yet). Once: the read moves the
  // descriptor's position (WriteAt does not depend on it).
  StatusOr<std::string> Read() {
    if (fd_ < 0) {
      if (open_errno_ == ENOENT) return std::string();
      errno = open_errno_;
      return Errno("cannot read", path_);
    }
    StatusOr<std::string> text = ReadToEnd(fd_, path_, size_);
    if (!text.ok()) return Internal("cannot read " + text.status().message());
    return text;
  }
  // Writes `bytes` at `offset` (in_place() only).
  Status WriteAt(const std::string& bytes, off_t offset) const {
    if (!in_place_ || pwrite(fd_, bytes.data(), bytes.size(), offset) != static_cast<ssize_t>(bytes.size()))
      return Errno("cannot write", path_);
    return Status::Ok();
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool in_place_ = false;
  int open_errno_ = 0;
  size_t size_ = 0;  // at the open
};

// Hands `owner` an entry on the card whose roster is `path` (its own if it has one, else
// the lowest free one, else -1) and records it. Under the roster lock.
StatusOr<int> AssignOne(const std::string& path, const std::string& owner, int64_t now_seconds, OwnerCheck* owners) {
  RosterFile file(path, RosterFile::Use::kAssign);
  GS_ASSIGN_OR_RETURN(const std::string text, file.Read());
  std::vector<Assignment> lines = Lines(text);
  OwnerCheck& check = *owners;
  // The owner stands (the caller checked): its own line is its entry unless an earlier
  // line gives that entry to another owner who stands (only in a roster of plain lines).
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].owner != owner) continue;
    bool earlier = false;
    for (size_t j = 0; j < i && !earlier; ++j) earlier = lines[j].entry == lines[i].entry && check.Stands(lines[j]);
    if (!earlier) return lines[i].entry;
  }
  // The lowest entry no standing owner holds; owners are asked only up to it.
  auto held = [&](int entry) {
    for (const auto& a : lines)
      if (a.entry == entry && check.Stands(a)) return true;
    return false;
  };
  int entry = 0;
  while (entry < region::kCardTenants && held(entry)) ++entry;
  if (entry == region::kCardTenants) return -1;
  Assignment mine{entry, now_seconds, owner};
  if (!file.in_place() || !InSlots(text)) {
    std::vector<Assignment> roster = Standing(lines);
    roster.push_back(mine);
    GS_RETURN_IF_ERROR(WriteRoster(path, roster));
    return entry;
  }
  GS_RETURN_IF_ERROR(file.WriteAt(Slot(mine), static_cast<off_t>(entry * kSlotBytes)));
  return entry;
}

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
  if (owner.size() > kMaxOwnerBytes)
    return InvalidArgument("card entry owner " + owner + " is " + std::to_string(owner.size()) +
                           " bytes, more than a roster line holds (" + std::to_string(kMaxOwnerBytes) +
                           "): use a shorter state or run directory");
  struct stat st;
  if (stat(owner.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return FailedPrecondition("card entry owner " + owner + " is not a directory");
  const std::string dir = CardEntriesDir(cards_dir);
  RosterLock lock(dir, /*make_dir=*/true);
  GS_RETURN_IF_ERROR(lock.status());
  std::vector<int> entries;
  OwnerCheck owners;
  for (const auto& uuid : uuids) {
    if (!UsableCardFileName(uuid)) return InvalidArgument("GPU UUID '" + uuid + "' cannot name a card roster file");
    GS_ASSIGN_OR_RETURN(int entry, AssignOne(dir + "/" + uuid, owner, now_seconds, &owners));
    entries.push_back(entry);
  }
  return entries;
}

Status PrepareCardRosters(const std::string& cards_dir, const std::vector<model::Gpu>& gpus) {
  const std::string dir = CardEntriesDir(cards_dir);
  RosterLock lock(dir, /*make_dir=*/true);
  GS_RETURN_IF_ERROR(lock.status());
  for (const auto& g : gpus) {
    if (!UsableCardFileName(g.uuid)) return InvalidArgument("GPU UUID '" + g.uuid + "' cannot name a card roster file");
    const std::string path = dir + "/" + g.uuid;
    if (access(path.c_str(), F_OK) == 0) continue;
    GS_RETURN_IF_ERROR(WriteRoster(path, {}));
  }
  return Status::Ok();
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
  const std::string dir = CardEntriesDir(cards_dir);
  RosterLock lock(dir, /*make_dir=*/false);  // a slot being written is never read half-written
  auto text = RosterFile(dir + "/" + uuid, RosterFile::Use::kRead).Read();
  if (!text.ok()) return out;
  for (const auto& a : Standing(Lines(*text)))
    if (a.owner == owner) out.push_back(a.entry);
  return out;
}

}  // namespace gs::node
