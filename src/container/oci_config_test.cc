#include "src/container/oci_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gs::container {
namespace {

ContainerConfig Parse(const std::string& json) {
  auto c = ParseContainerConfig(json, "/b");
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : ContainerConfig{};
}

TEST(OciConfig, EnvironmentAndRoot) {
  ContainerConfig c = Parse(R"({"root":{"path":"rootfs"},"process":{"env":["PATH=/bin",
      "NVIDIA_VISIBLE_DEVICES=0","NVIDIA_DRIVER_CAPABILITIES=compute","NVIDIA_VISIBLE_DEVICES=all"]}})");
  EXPECT_EQ(c.rootfs, "/b/rootfs");
  EXPECT_TRUE(c.visible_set);
  EXPECT_EQ(c.visible, "all");  // the last definition, as the process sees it
  EXPECT_EQ(c.capabilities, "compute");
  EXPECT_FALSE(c.privileged);
  EXPECT_TRUE(c.marker_devices.empty());
  // The whole environment, in order: the limits the container asks for come from it.
  EXPECT_EQ(c.env, (std::vector<std::string>{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0",
                                             "NVIDIA_DRIVER_CAPABILITIES=compute", "NVIDIA_VISIBLE_DEVICES=all"}));
  EXPECT_FALSE(c.limits_mounted);
  EXPECT_EQ(Parse(R"({"root":{"path":"/abs"}})").rootfs, "/abs");
}

// The GPUs a CDI runtime gave the container are its /dev/nvidia<N> character devices of
// the NVIDIA major; control nodes, other majors and look-alike names are not GPUs.
TEST(OciConfig, GpuDeviceNodesGiveTheirMinors) {
  ContainerConfig c = Parse(R"({"root":{"path":"r"},"linux":{"devices":[
      {"path":"/dev/nvidiactl","type":"c","major":195,"minor":255},
      {"path":"/dev/nvidia1","type":"c","major":195,"minor":1},
      {"path":"/dev/nvidia-uvm","type":"c","major":510,"minor":0},
      {"path":"/dev/nvidia0","type":"c","major":195,"minor":0},
      {"path":"/dev/nvidia1","type":"c","major":195,"minor":1},
      {"path":"/dev/nvidia7","type":"c","major":10,"minor":7},
      {"path":"/dev/nvidia2","type":"b","major":195,"minor":2},
      {"path":"/dev/nvidia3x","type":"c","major":195,"minor":3},
      {"path":"/dev/nvidia4"},
      "junk", {"type":"c"}]}})");
  EXPECT_EQ(c.gpu_minors, (std::vector<unsigned>{1, 0, 4}));
  EXPECT_TRUE(Parse(R"({"root":{"path":"r"},"linux":{"devices":{}}})").gpu_minors.empty());
}

// The node agent's slice comes through the kubelet as a mount at the limits file: the
// hook then makes none of its own.
TEST(OciConfig, AMountAtTheLimitsFileIsSeen) {
  EXPECT_TRUE(Parse(R"({"root":{"path":"r"},"mounts":[{"destination":"/etc/gpuslice//limits","source":"/s/l"}]})")
                  .limits_mounted);
  EXPECT_FALSE(
      Parse(R"({"root":{"path":"r"},"mounts":[{"destination":"/etc/gpuslice","source":"/s"}]})").limits_mounted);
}

TEST(OciConfig, MarkersAreDevNullMountsDirectlyUnderTheMarkerDirectory) {
  ContainerConfig c = Parse(R"({"root":{"path":"r"},"mounts":[
    {"destination":"/var/run/nvidia-container-devices/GPU-aaaa","type":"bind","source":"/dev/null","options":["rbind","ro"]},
    {"destination":"/var/run/nvidia-container-devices/GPU-bbbb/","source":"/dev//null"},
    {"destination":"/var/run/nvidia-container-devices/GPU-aaaa","source":"/dev/null"},
    {"destination":"/var/run/nvidia-container-devices/GPU-cccc","source":"/var/lib/containers/volumes/x/_data"},
    {"destination":"/var/run/nvidia-container-devices/../../etc","source":"/dev/null"},
    {"destination":"/var/run/nvidia-container-devices/cdi/nvidia.com/gpu=0","source":"/dev/null"},
    {"destination":"/var/run/nvidia-container-devices","source":"/dev/null"},
    {"destination":"/var/run/nvidia-container-devices-x/GPU-dddd","source":"/dev/null"},
    {"destination":"/proc","type":"proc","source":"proc"},
    {"destination":7,"source":"/dev/null"}]})");
  // An image's VOLUME becomes a mount of a volume directory, never of /dev/null.
  EXPECT_EQ(c.marker_devices, (std::vector<std::string>{"GPU-aaaa", "GPU-bbbb"}));
}

TEST(OciConfig, PrivilegedMeansSysAdminInTheBoundingSet) {
  EXPECT_TRUE(Parse(R"({"root":{"path":"r"},"process":{"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_ADMIN"]}}})")
                  .privileged);
  // runc's default spec: not privileged.
  EXPECT_FALSE(Parse(R"({"root":{"path":"r"},"process":{"capabilities":{
      "bounding":["CAP_AUDIT_WRITE","CAP_KILL","CAP_NET_BIND_SERVICE"],"effective":["CAP_SYS_ADMIN"]}}})")
                   .privileged);
  EXPECT_TRUE(Parse(R"({"root":{"path":"r"},"process":{"capabilities":["CAP_SYS_ADMIN"]}})").privileged);  // rc1..rc4
  EXPECT_FALSE(Parse(R"({"root":{"path":"r"},"process":{"capabilities":{"bounding":"CAP_SYS_ADMIN"}}})").privileged);
}

TEST(OciConfig, MalformedConfigNamesTheFileAndField) {
  auto c = ParseContainerConfig("{not json", "/b");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/b/config.json"), std::string::npos) << c.status().message();
  c = ParseContainerConfig(R"({"process":{}})", "/b");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("\"root\""), std::string::npos) << c.status().message();
  c = ParseContainerConfig(R"({"root":{"path":"r"},"process":{"env":["A=1",3]}})", "/b");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("\"env\""), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace gs::container
