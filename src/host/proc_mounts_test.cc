#include "src/host/proc_mounts.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace gs::host {
namespace {

// Lines as a container's /proc/<pid>/mountinfo shows them (runc, overlay root), and the
// same tmpfs as the host sees it.
constexpr const char* kContainer =
    "1190 1010 0:112 / / rw,relatime master:470 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "1191 1190 0:115 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "1200 1190 0:58 / /var/run/gpuslice rw,nosuid,nodev,noexec,relatime master:301 - tmpfs gpuslice-shared "
    "rw,size=4096k,nr_inodes=64\n"
    "1201 1190 8:1 /var/lib/gpuslice/containers/ab/limits /etc/gpuslice/limits ro,relatime - ext4 /dev/sda1 rw\n";

TEST(ParseMountinfo, ReadsDeviceMountPointAndTypeOfEveryLine) {
  auto e = ParseMountinfo(kContainer);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[2].major, 0u);
  EXPECT_EQ(e[2].minor, 58u);
  EXPECT_EQ(e[2].mount_point, "/var/run/gpuslice");
  EXPECT_EQ(e[2].fs_type, "tmpfs");
  EXPECT_EQ(e[3].major, 8u);
  EXPECT_EQ(e[3].minor, 1u);
  EXPECT_EQ(e[3].mount_point, "/etc/gpuslice/limits");
  EXPECT_EQ(e[1].fs_type, "proc");  // no optional fields before the separator
}

TEST(ParseMountinfo, DecodesOctalEscapesInMountPoints) {
  auto e = ParseMountinfo("36 35 0:58 / /var/run/gpu\\040slice\\134x rw - tmpfs t rw\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].mount_point, "/var/run/gpu slice\\x");
  // A backslash not followed by three octal digits stays as it is.
  e = ParseMountinfo("36 35 0:58 / /a\\9b\\04 rw - tmpfs t rw\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].mount_point, "/a\\9b\\04");
}

TEST(ParseMountinfo, SkipsMalformedLinesAndKeepsTheRest) {
  std::string text =
      "garbage\n"
      "36 35 058 / /var/run/gpuslice rw - tmpfs t rw\n"         // no colon in the device
      "36 35 0:x / /var/run/gpuslice rw - tmpfs t rw\n"         // minor not a number
      "36 35 0:58 / /var/run/gpuslice rw shared:1\n"            // no separator
      "36 35 0:58 / /var/run/gpuslice rw -\n"                   // no type
      "36 35 0:99999999999 / /var/run/gpuslice rw - tmpfs t\n"  // out of range
      "36 35 0:58 /\n"                                          // cut short
      "\n"
      "36 35 0:59 / /var/run/gpuslice rw - tmpfs t rw";  // the last line, without its newline
  auto e = ParseMountinfo(text);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].minor, 59u);
  EXPECT_TRUE(ParseMountinfo("").empty());
  EXPECT_TRUE(ParseMountinfo(std::string(1000, '\\')).empty());
}

// Propagation: a mount made under a mount of peer group N reaches the group's other mounts
// and its slaves (master:N); what a mount shows is read from its optional fields.
TEST(ParseMountinfo, ReadsTheMountIdAndItsPropagation) {
  auto e = ParseMountinfo(
      "21 1 254:0 / / rw - ext4 /dev/vda rw\n"
      "22 21 254:0 /s /var/lib/gpuslice rw shared:7 master:2 - ext4 /dev/vda rw\n"
      "23 21 254:0 /t /var/lib/other rw master:9 - ext4 /dev/vda rw\n"
      "24 21 254:0 /u /var/lib/bad rw shared:x - ext4 /dev/vda rw\n");
  ASSERT_EQ(e.size(), 3u);  // "shared:x" does not parse
  EXPECT_EQ(e[0].id, 21u);
  EXPECT_EQ(e[0].peer_group, 0u);
  EXPECT_EQ(e[0].master, 0u);
  EXPECT_EQ(e[1].id, 22u);
  EXPECT_EQ(e[1].peer_group, 7u);
  EXPECT_EQ(e[1].master, 2u);
  EXPECT_EQ(e[2].peer_group, 0u);
  EXPECT_EQ(e[2].master, 9u);
}

TEST(MountIdOf, NamesAnEntryOfTheProcesssOwnMountinfo) {
  auto id = MountIdOf("/proc");
  ASSERT_TRUE(id.ok()) << id.status().message();
  auto own = ReadProcessMounts(getpid());
  ASSERT_TRUE(own.ok()) << own.status().message();
  bool found = false;
  for (const auto& m : own->entries) found |= m.id == *id && m.mount_point == "/proc";
  EXPECT_TRUE(found) << *id;
  EXPECT_FALSE(MountIdOf("/no/such/path").ok());
}

TEST(DevicesMountedAt, ListsEveryMountAtThatPointOnly) {
  auto e = ParseMountinfo(std::string(kContainer) +
                          "1300 1200 0:77 / /var/run/gpuslice rw - tmpfs other rw\n"  // mounted over it
                          "1301 1190 0:78 / /var/run/gpuslice/x rw - tmpfs other rw\n");
  auto devs = DevicesMountedAt(e, "/var/run/gpuslice");
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[0], std::make_pair(0u, 58u));
  EXPECT_EQ(devs[1], std::make_pair(0u, 77u));
  EXPECT_TRUE(DevicesMountedAt(e, "/var/run").empty());
}

TEST(ReadProcessMounts, ReadsItsOwnProcessAsInTheReadersNamespace) {
  auto m = ReadProcessMounts(getpid());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->same_namespace_as_reader);
  EXPECT_GT(m->start_time, 0u);
  bool root = false;
  for (const auto& e : m->entries) root |= e.mount_point == "/";
  EXPECT_TRUE(root);
  EXPECT_FALSE(ReadProcessMounts(0x3fffffff).ok());  // above pid_max: no such process
}

}  // namespace
}  // namespace gs::host
