#include "src/container/device_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gs::container {
namespace {

ContainerConfig Env(const std::string& visible, bool privileged = false) {
  ContainerConfig c;
  c.visible = visible;
  c.visible_set = true;
  c.privileged = privileged;
  return c;
}

DeviceDecision Decide(const ContainerConfig& c, bool accept_env = false) {
  auto d = DecideDevices(c, DevicePolicy{accept_env});
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? *d : DeviceDecision{};
}

// Every CUDA base image sets NVIDIA_VISIBLE_DEVICES=all.
TEST(DeviceRequest, UnprivilegedEnvironmentWithoutAllocationGetsNothingAndSaysWhy) {
  DeviceDecision d = Decide(Env("all"));
  EXPECT_EQ(d.devices.kind, model::Visibility::kVoid);
  EXPECT_EQ(d.source, DeviceSource::kNone);
  EXPECT_NE(d.ignored.find("NVIDIA_VISIBLE_DEVICES=\"all\""), std::string::npos) << d.ignored;
  EXPECT_NE(d.ignored.find("unprivileged"), std::string::npos) << d.ignored;
  EXPECT_NE(d.ignored.find("--accept-env-when-unprivileged"), std::string::npos) << d.ignored;
  EXPECT_EQ(Decide(Env("none")).devices.kind, model::Visibility::kVoid);  // not even the driver
  EXPECT_EQ(Decide(Env("0,1")).devices.kind, model::Visibility::kVoid);
  // A refused value is never used, so a malformed one is no error either.
  EXPECT_FALSE(Decide(Env("0,../../etc")).ignored.empty());
}

TEST(DeviceRequest, NoRequestIsNoMessage) {
  EXPECT_TRUE(Decide(ContainerConfig{}).ignored.empty());
  EXPECT_TRUE(Decide(Env("void")).ignored.empty());
  EXPECT_TRUE(Decide(Env("")).ignored.empty());
  EXPECT_EQ(Decide(Env("void")).devices.kind, model::Visibility::kVoid);
}

TEST(DeviceRequest, PrivilegedOrOptedInHonoursTheEnvironment) {
  DeviceDecision d = Decide(Env("all", true));
  EXPECT_EQ(d.devices.kind, model::Visibility::kAll);
  EXPECT_EQ(d.source, DeviceSource::kEnvironment);
  EXPECT_TRUE(d.ignored.empty());
  d = Decide(Env("1,GPU-abcd"), true);
  EXPECT_EQ(d.devices.kind, model::Visibility::kList);
  EXPECT_EQ(d.devices.items, (std::vector<std::string>{"1", "GPU-abcd"}));
  EXPECT_EQ(Decide(Env("none"), true).devices.kind, model::Visibility::kNone);
  auto bad = DecideDevices(Env("0,../../etc"), DevicePolicy{true});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'../../etc' is not a GPU index or UUID"), std::string::npos);
}

TEST(DeviceRequest, MarkersAreTheListAndTheEnvironmentCannotWidenThem) {
  ContainerConfig c = Env("all");
  c.marker_devices = {"GPU-aaaa", "GPU-bbbb"};
  for (bool accept : {false, true}) {
    DeviceDecision d = Decide(c, accept);
    EXPECT_EQ(d.source, DeviceSource::kMarkers);
    EXPECT_EQ(d.devices.kind, model::Visibility::kList);
    EXPECT_EQ(d.devices.items, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"}));
    EXPECT_TRUE(d.ignored.empty());
  }
  ContainerConfig unset;
  unset.marker_devices = {"all"};
  EXPECT_EQ(Decide(unset).devices.kind, model::Visibility::kAll);
  unset.marker_devices = {"GPU-aaaa", "x;y"};
  auto bad = DecideDevices(unset, DevicePolicy{});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/var/run/nvidia-container-devices"), std::string::npos)
      << bad.status().message();
}

TEST(DeviceRequest, MessagesNeverCarryControlCharacters) {
  DeviceDecision d = Decide(Env("all\n2024-01-01 forged line\x1b[2J"));
  EXPECT_EQ(d.ignored.find('\n'), std::string::npos);
  EXPECT_EQ(d.ignored.find('\x1b'), std::string::npos);
  EXPECT_NE(d.ignored.find("all\\x0a2024"), std::string::npos) << d.ignored;
  EXPECT_EQ(Printable(std::string(300, 'a')).size(), 131u);
}

}  // namespace
}  // namespace gs::container
