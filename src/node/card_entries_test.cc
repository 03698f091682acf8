// The card entries roster: each container's slice gets an entry of its own on each card,
// keeps it while its directory exists, and gives it back when the directory goes;
// concurrent assigners (the agent, hooks, runs) never hand one entry out twice.
#include "src/node/card_entries.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "src/region/card.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;

namespace gs::node {
namespace {

class CardEntriesTest : public ::testing::Test {
 protected:
  std::string Owner(const std::string& name) {
    std::string d = dir_.path() + "/owners/" + name;
    fs::create_directories(d);
    return d;
  }
  std::vector<int> Assign(const std::string& owner, const std::vector<std::string>& uuids = {"GPU-a"},
                          int64_t now = 1000) {
    auto e = AssignCardEntries(cards_, uuids, owner, now);
    EXPECT_TRUE(e.ok()) << e.status().message();
    return e.ok() ? *e : std::vector<int>{};
  }
  testing::TempDir dir_;
  std::string cards_ = dir_.path() + "/cards";
};

TEST_F(CardEntriesTest, RosterIsASiblingOfTheCardsDirectory) {
  EXPECT_EQ(CardEntriesDir("/var/lib/gpuslice/cards"), "/var/lib/gpuslice/card-entries");
  EXPECT_EQ(CardEntriesDir("/var/lib/gpuslice/cards/"), "/var/lib/gpuslice/card-entries");
  EXPECT_EQ(CardEntriesDir("/cards"), "/card-entries");
}

TEST_F(CardEntriesTest, EachOwnerGetsItsOwnEntryAndKeepsIt) {
  std::string a = Owner("a"), b = Owner("b");
  EXPECT_EQ(Assign(a, {"GPU-a", "GPU-b"}), (std::vector<int>{0, 0}));
  EXPECT_EQ(Assign(b, {"GPU-a"}), std::vector<int>{1});
  EXPECT_EQ(Assign(a, {"GPU-b", "GPU-a"}), (std::vector<int>{0, 0}));  // asked again: the same
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", b), std::vector<int>{1});
}

TEST_F(CardEntriesTest, AnEntryComesBackWhenItsOwnerIsGone) {
  std::string a = Owner("a"), b = Owner("b");
  Assign(a);
  Assign(b);
  fs::remove_all(a);
  EXPECT_TRUE(CardEntriesOf(cards_, "GPU-a", a).empty());
  EXPECT_EQ(Assign(Owner("c")), std::vector<int>{0});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", b), std::vector<int>{1});
  // A directory of the same path made again (a container id reused) is a new owner of it.
  EXPECT_EQ(Assign(Owner("a")), std::vector<int>{2});
}

TEST_F(CardEntriesTest, AFullCardGivesNoEntryAndLosesNone) {
  for (int i = 0; i < region::kCardTenants; ++i) ASSERT_EQ(Assign(Owner("o" + std::to_string(i))), std::vector<int>{i});
  EXPECT_EQ(Assign(Owner("late")), std::vector<int>{-1});
  for (int i = 0; i < region::kCardTenants; ++i)
    EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", Owner("o" + std::to_string(i))), std::vector<int>{i});
}

TEST_F(CardEntriesTest, ABrokenRosterLineOnlyFreesItsEntry) {
  std::string a = Owner("a");
  Assign(a);
  std::ofstream(CardEntriesDir(cards_) + "/GPU-a", std::ios::app)
      << "garbage\n7 1000 relative/owner\n99 1000 /abs\n0 1000 " << Owner("twice") << "\n-1 5 /x\n";
  EXPECT_EQ(Assign(Owner("b")), std::vector<int>{1});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{0});
}

// The roster is 64 slots of 256 bytes, slot i holding entry i: handing out an entry
// rewrites that slot alone.
TEST_F(CardEntriesTest, EachEntryHasAFixedSlotWrittenInPlace) {
  std::string a = Owner("a"), b = Owner("b");
  Assign(a, {"GPU-a"}, 1111);
  Assign(b, {"GPU-a"}, 2222);
  const std::string path = CardEntriesDir(cards_) + "/GPU-a";
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  Assign(Owner("c"), {"GPU-a"}, 3333);
  struct stat after {};
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "a new entry is written in place, not by rename";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.size(), 64u * 256u);
  // Each line reads "<entry> <time> <owner>" split on whitespace, the padding before the
  // owner: a reader of plain lines (an older gpuslice) gets the same owners.
  const std::vector<std::tuple<int, int64_t, std::string>> want = {{0, 1111, a}, {1, 2222, b}, {2, 3333, Owner("c")}};
  for (const auto& [entry, at, owner] : want) {
    std::string slot = text.substr(static_cast<size_t>(entry) * 256, 256);
    std::istringstream fields(slot);
    int e = -1;
    int64_t t = 0;
    std::string o;
    fields >> e >> t;
    std::getline(fields >> std::ws, o);
    EXPECT_EQ(e, entry) << slot;
    EXPECT_EQ(t, at) << slot;
    EXPECT_EQ(o, owner) << slot;
  }
  EXPECT_EQ(text.substr(768, 256), std::string(255, ' ') + "\n");
}

// A roster written as plain lines (by an older agent) keeps every standing entry and is
// turned into slots at the next assignment.
TEST_F(CardEntriesTest, ARosterOfPlainLinesKeepsItsEntriesAndBecomesSlots) {
  std::string a = Owner("a"), b = Owner("b");
  fs::create_directories(CardEntriesDir(cards_));
  const std::string path = CardEntriesDir(cards_) + "/GPU-a";
  std::ofstream(path) << "3 900 " << a << "\n0 900 " << b << "\n";
  EXPECT_EQ(Assign(Owner("c")), std::vector<int>{1});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{3});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", b), std::vector<int>{0});
  EXPECT_EQ(fs::file_size(path), 64u * 256u);
  EXPECT_EQ(Assign(Owner("d")), std::vector<int>{2});
  EXPECT_EQ(Assign(a), std::vector<int>{3});
}

// An owner an older version recorded that is too long for a slot keeps its entry: the
// roster then stays in plain lines rather than cut the owner's path short.
TEST_F(CardEntriesTest, AnOldOwnerTooLongForASlotKeepsItsEntry) {
  std::string deep = Owner(std::string(200, 'd') + "/" + std::string(40, 'e'));
  fs::create_directories(CardEntriesDir(cards_));
  const std::string path = CardEntriesDir(cards_) + "/GPU-a";
  std::ofstream(path) << "0 900 " << deep << "\n";
  EXPECT_EQ(Assign(Owner("b")), std::vector<int>{1});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", deep), std::vector<int>{0});
  EXPECT_EQ(Assign(Owner("c")), std::vector<int>{2});
  fs::remove_all(deep);
  EXPECT_EQ(Assign(Owner("d")), std::vector<int>{0});
  EXPECT_EQ(fs::file_size(path), 64u * 256u) << "slots again once the long owner is gone";
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", Owner("c")), std::vector<int>{2});
}

// A roster of plain lines may name an entry twice (an older agent's, hand-edited): the
// entry is held while any of its owners stands, whichever line comes first.
TEST_F(CardEntriesTest, AnEntryIsHeldWhileAnyOfItsLinesStands) {
  std::string a = Owner("a"), gone = Owner("gone");
  fs::remove_all(gone);
  fs::create_directories(CardEntriesDir(cards_));
  std::ofstream(CardEntriesDir(cards_) + "/GPU-a") << "0 900 " << gone << "\n0 900 " << a << "\n";
  EXPECT_EQ(Assign(Owner("c")), std::vector<int>{1});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{0});
  // An owner named on a later line of an entry an earlier standing owner holds does not
  // hold it: it gets an entry of its own.
  std::string d = Owner("d");
  std::ofstream(CardEntriesDir(cards_) + "/GPU-b") << "0 900 " << a << "\n0 900 " << d << "\n";
  EXPECT_EQ(Assign(d, {"GPU-b"}), std::vector<int>{1});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-b", d), std::vector<int>{1});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-b", a), std::vector<int>{0});
}

// The agent makes each card's roster when it starts, so that no Allocate pays for a new
// file; a roster that exists (containers hold entries) is kept as it is.
TEST_F(CardEntriesTest, RostersMadeAtStartAreBlankAndExistingOnesKept) {
  std::string a = Owner("a");
  Assign(a, {"GPU-a"});
  const std::string dir = CardEntriesDir(cards_);
  struct stat kept {};
  ASSERT_EQ(stat((dir + "/GPU-a").c_str(), &kept), 0);
  std::vector<model::Gpu> gpus = {{"GPU-a", 0, "T4", 16ull << 30, 0, 0, true},
                                  {"GPU-b", 1, "T4", 16ull << 30, 0, 0, true}};
  ASSERT_TRUE(PrepareCardRosters(cards_, gpus).ok());
  struct stat now {};
  ASSERT_EQ(stat((dir + "/GPU-a").c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, kept.st_ino);
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{0});
  std::ifstream in(dir + "/GPU-b");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string blank;
  for (int i = 0; i < region::kCardTenants; ++i) blank += std::string(255, ' ') + "\n";
  EXPECT_EQ(text, blank);
  struct stat made {};
  ASSERT_EQ(stat((dir + "/GPU-b").c_str(), &made), 0);
  EXPECT_EQ(Assign(Owner("b"), {"GPU-b"}), std::vector<int>{0});
  ASSERT_EQ(stat((dir + "/GPU-b").c_str(), &now), 0);
  EXPECT_EQ(now.st_ino, made.st_ino) << "the first entry of a prepared roster is written in place";
  gpus.push_back({"../x", 2, "T4", 16ull << 30, 0, 0, true});
  Status bad = PrepareCardRosters(cards_, gpus);
  EXPECT_NE(bad.message().find("GPU UUID '../x'"), std::string::npos) << bad.message();
}

// A slot torn by a crash mid-write frees its entry alone.
TEST_F(CardEntriesTest, ATornSlotFreesOnlyItsEntry) {
  std::string a = Owner("a"), b = Owner("b"), c = Owner("c");
  Assign(a);
  Assign(b);
  Assign(c);
  const std::string path = CardEntriesDir(cards_) + "/GPU-a";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(256 + 4);
    f << "\x01garbage";  // slot 1, entry b's line, half overwritten
  }
  EXPECT_TRUE(CardEntriesOf(cards_, "GPU-a", b).empty());
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{0});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", c), std::vector<int>{2});
  EXPECT_EQ(Assign(Owner("d")), std::vector<int>{1});
}

TEST_F(CardEntriesTest, BadOwnerOrUuidIsRefusedByName) {
  auto r = AssignCardEntries(cards_, {"GPU-a"}, "relative", 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'relative' is not an absolute path"), std::string::npos);
  r = AssignCardEntries(cards_, {"GPU-a"}, dir_.path() + "/never-made", 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("never-made is not a directory"), std::string::npos);
  std::string deep = Owner(std::string(200, 'd') + "/" + std::string(40, 'e'));
  r = AssignCardEntries(cards_, {"GPU-a"}, deep, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than a roster line holds"), std::string::npos) << r.status().message();
  r = AssignCardEntries(cards_, {"../x"}, Owner("a"), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GPU UUID '../x'"), std::string::npos);
  // The roster directory's lock file is no card's roster.
  r = AssignCardEntries(cards_, {".lock"}, Owner("a"), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GPU UUID '.lock'"), std::string::npos);
  r = AssignCardEntries(cards_, {"GPU-a.new"}, Owner("a"), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("GPU UUID 'GPU-a.new'"), std::string::npos);
}

// The roster directory is made on demand; when it cannot be, the error names it, not its
// lock file.
TEST_F(CardEntriesTest, ARosterDirectoryThatCannotBeMadeIsNamed) {
  auto r = AssignCardEntries(dir_.path() + "/no/such/cards", {"GPU-a"}, Owner("a"), 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot create " + dir_.path() + "/no/such/card-entries"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(Assign(Owner("a")), std::vector<int>{0});
  EXPECT_TRUE(fs::is_directory(CardEntriesDir(cards_)));
}

// A roster that is a link (whoever made it) is read where it leads and replaced by a file
// of its own at the next assignment; never written through, and never a card's dead end.
TEST_F(CardEntriesTest, ARosterThatIsALinkIsReplacedNotWrittenThrough) {
  std::string a = Owner("a"), b = Owner("b");
  EXPECT_EQ(Assign(a), std::vector<int>{0});
  const std::string roster = CardEntriesDir(cards_) + "/GPU-a", elsewhere = dir_.path() + "/elsewhere";
  fs::rename(roster, elsewhere);
  fs::create_symlink(elsewhere, roster);
  std::string before;
  std::getline(std::ifstream(elsewhere), before, '\0');
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{0}) << "read through the link";
  EXPECT_EQ(Assign(a), std::vector<int>{0}) << "its entry, read through the link";
  EXPECT_EQ(Assign(b), std::vector<int>{1});
  EXPECT_FALSE(fs::is_symlink(roster));
  std::string after;
  std::getline(std::ifstream(elsewhere), after, '\0');
  EXPECT_EQ(after, before) << "written through the link";
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", a), std::vector<int>{0});
  EXPECT_EQ(CardEntriesOf(cards_, "GPU-a", b), std::vector<int>{1});
  // A link to nowhere: a blank roster, made a file at the first assignment.
  const std::string other = CardEntriesDir(cards_) + "/GPU-b";
  fs::create_symlink(dir_.path() + "/nowhere", other);
  EXPECT_EQ(Assign(Owner("c"), {"GPU-b"}), std::vector<int>{0});
  EXPECT_FALSE(fs::is_symlink(other));
  EXPECT_FALSE(fs::exists(dir_.path() + "/nowhere"));
  // A link to a pipe (nothing ever writes to it), a loop of links: blank, replaced; the
  // assignment neither waits nor fails.
  const std::string pipe = dir_.path() + "/pipe", third = CardEntriesDir(cards_) + "/GPU-c",
                    fourth = CardEntriesDir(cards_) + "/GPU-d";
  ASSERT_EQ(mkfifo(pipe.c_str(), 0600), 0);
  fs::create_symlink(pipe, third);
  fs::create_symlink(fourth, fourth);
  EXPECT_EQ(Assign(Owner("d"), {"GPU-c", "GPU-d"}), (std::vector<int>{0, 0}));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(third)));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(fourth)));
}

// Processes assigning at once (hooks of containers started together, the agent) never
// hand one entry to two owners.
TEST_F(CardEntriesTest, ConcurrentAssignersNeverShareAnEntry) {
  constexpr int kProcs = 4, kEach = 12;
  for (int p = 0; p < kProcs; ++p)
    for (int i = 0; i < kEach; ++i) Owner("p" + std::to_string(p) + "-" + std::to_string(i));
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < kEach; ++i) {
        auto e = AssignCardEntries(cards_, {"GPU-a"},
                                   dir_.path() + "/owners/p" + std::to_string(p) + "-" + std::to_string(i), 1000);
        if (!e.ok() || (*e)[0] < 0) _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::set<int> seen;
  for (int p = 0; p < kProcs; ++p)
    for (int i = 0; i < kEach; ++i) {
      auto e = CardEntriesOf(cards_, "GPU-a", Owner("p" + std::to_string(p) + "-" + std::to_string(i)));
      ASSERT_EQ(e.size(), 1u);
      EXPECT_TRUE(seen.insert(e[0]).second) << "entry " << e[0] << " given twice";
    }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kProcs * kEach));
}

}  // namespace
}  // namespace gs::node
