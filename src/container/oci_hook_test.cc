// What the hook reads of the container state before anything else: whether the runtime
// runs it at poststop (a hooks.d file gives one command line for every stage).
#include "src/container/oci_hook.h"

#include <gtest/gtest.h>

namespace gs::container {
namespace {

TEST(HookState, OnlyAStoppedStatusMeansPoststop) {
  EXPECT_TRUE(StateIsStopped(R"({"ociVersion":"1.0.2","id":"c","status":"stopped","bundle":"/b"})"));
  for (const char* other : {R"({"id":"c","status":"creating","pid":7,"bundle":"/b"})",
                            R"({"id":"c","status":"created","pid":7,"bundle":"/b"})", R"({"id":"c"})",
                            R"({"status":["stopped"]})", R"(["stopped"])", "not json", ""})
    EXPECT_FALSE(StateIsStopped(other)) << other;
}

}  // namespace
}  // namespace gs::container
