// ExtenderArgs read in one pass: the same verdicts as a JSON tree would give (accepted,
// rejected, which message), names with escapes decoded, and replies that copy names as
// written still valid JSON.
#include "src/scheduler/extender_args.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gs::scheduler {
namespace {

using nlohmann::json;

std::string Message(std::string_view body) {
  ExtenderArgs a;
  Status s = ParseExtenderArgs(body, &a);
  return s.ok() ? "ok" : s.message();
}

TEST(ExtenderArgs, ReadsThePodAndTheNamesAsKubeSchedulerSendsThem) {
  std::string body = R"({"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[]}},"Nodes":null,)"
                     R"("NodeNames":["node-a", "node-b","n\u00e9\"x\\"]})";
  ExtenderArgs a;
  ASSERT_TRUE(ParseExtenderArgs(body, &a).ok());
  EXPECT_EQ(json::parse(a.pod)["metadata"]["uid"], "u");
  ASSERT_EQ(a.names.size(), 3u);
  EXPECT_EQ(a.names[0], "node-a");
  EXPECT_EQ(a.names[1], "node-b");
  EXPECT_EQ(a.names[2], "n\xC3\xA9\"x\\");
  EXPECT_EQ(a.raw[2], R"(n\u00e9\"x\\)");
  // What a reply copies (the raw text) reads back as the name.
  EXPECT_EQ(json::parse("\"" + std::string(a.raw[2]) + "\""), std::string(a.names[2]));
}

TEST(ExtenderArgs, AgreesWithAJsonTreeOnWhatIsValid) {
  const char* bodies[] = {
      R"({"Pod":{},"NodeNames":[]})",
      R"( {"Pod" : { "a" : [1, -2.5e3, true, false, null, "x", {}] } , "NodeNames" : [ "a" ] } )",
      "\xEF\xBB\xBF{\"Pod\":{},\"NodeNames\":[]}",
      R"({"Pod":{"x":"\ud83d\ude00"},"NodeNames":["\u00e9"]})",
      "{\"Pod\":{\"x\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"},\"NodeNames\":[]}",
      R"({"Pod":{"x":1e-999},"NodeNames":[]})",
      R"({"Pod":{"x":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]},"NodeNames":[]})",
      // Invalid: each must be refused as not JSON.
      R"({"Pod":{},"NodeNames":[]} x)",
      R"({"Pod":{},"NodeNames":[],})",
      R"({"Pod":{},"NodeNames":["a",]})",
      R"({"Pod":{"x":01},"NodeNames":[]})",
      R"({"Pod":{"x":1.},"NodeNames":[]})",
      R"({"Pod":{"x":-},"NodeNames":[]})",
      R"({"Pod":{"x":1e999},"NodeNames":[]})",
      R"({"Pod":{"x":tru},"NodeNames":[]})",
      R"({"Pod":{"x":"\x"},"NodeNames":[]})",
      R"({"Pod":{"x":"\ud83d"},"NodeNames":[]})",
      R"({"Pod":{"x":"\ude00"},"NodeNames":[]})",
      R"({"Pod":{"x":"\u12g4"},"NodeNames":[]})",
      "{\"Pod\":{\"x\":\"\t\"},\"NodeNames\":[]}",
      "{\"Pod\":{\"x\":\"\xC0\xAF\"},\"NodeNames\":[]}",
      "{\"Pod\":{\"x\":\"\xED\xA0\x80\"},\"NodeNames\":[]}",
      "{\"Pod\":{\"x\":\"\xF4\x90\x80\x80\"},\"NodeNames\":[]}",
      "{\"Pod\":{\"x\":\"\xE2\x82\"},\"NodeNames\":[]}",
      R"({"Pod":{"x":[1,2}},"NodeNames":[]})",
      R"({"Pod":{"x" 1},"NodeNames":[]})",
      R"({"Pod":{1:1},"NodeNames":[]})",
      R"({"Pod":{},"NodeNames":["a")",
      "",
      "{",
  };
  for (const char* body : bodies) {
    bool tree = !json::parse(body, nullptr, false).is_discarded();
    ExtenderArgs a;
    bool ours = ParseExtenderArgs(body, &a).ok();
    EXPECT_EQ(ours, tree) << body;
  }
}

TEST(ExtenderArgs, SaysWhatIsMissing) {
  EXPECT_EQ(Message("[]"), "ExtenderArgs: not a JSON object");
  EXPECT_EQ(Message("{not json"), "ExtenderArgs: not a JSON object");
  EXPECT_EQ(Message(R"({"NodeNames":[]})"), R"(ExtenderArgs: no "Pod" object)");
  EXPECT_EQ(Message(R"({"Pod":[],"NodeNames":[]})"), R"(ExtenderArgs: no "Pod" object)");
  EXPECT_NE(Message(R"({"Pod":{},"Nodes":{"items":[]}})").find("nodeCacheCapable"), std::string::npos);
  EXPECT_NE(Message(R"({"Pod":{},"NodeNames":null})").find("nodeCacheCapable"), std::string::npos);
  EXPECT_EQ(Message(R"({"Pod":{},"NodeNames":"a"})"), R"(ExtenderArgs: "NodeNames" is not an array)");
  EXPECT_EQ(Message(R"({"Pod":{},"NodeNames":["a",1]})"), R"(ExtenderArgs: a "NodeNames" entry is not a string)");
  // A repeated key: the last one counts, as in a JSON tree.
  ExtenderArgs a;
  ASSERT_TRUE(ParseExtenderArgs(R"({"Pod":{"a":1},"NodeNames":["x"],"Pod":{"b":2},"NodeNames":["y","z"]})", &a).ok());
  EXPECT_EQ(a.pod, R"({"b":2})");
  EXPECT_EQ(a.names, (std::vector<std::string_view>{"y", "z"}));
  ASSERT_TRUE(ParseExtenderArgs(R"({"\u0050od":{},"NodeNames":[]})", &a).ok()) << "keys are compared decoded";
}

TEST(ExtenderArgs, AppendJsonStringEscapesWhatJsonRequires) {
  std::string out;
  AppendJsonString(std::string("a\"b\\c\n\x01", 7) + "\xC3\xA9", &out);
  EXPECT_EQ(out, "\"a\\\"b\\\\c\\u000a\\u0001\xC3\xA9\"");
  EXPECT_EQ(json::parse(out).get<std::string>(), std::string("a\"b\\c\n\x01", 7) + "\xC3\xA9");
}

}  // namespace
}  // namespace gs::scheduler
