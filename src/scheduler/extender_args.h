// kube-scheduler's ExtenderArgs ({"Pod": {...}, "Nodes": ..., "NodeNames": [...]}) read
// in one pass without building a JSON tree: the whole body is checked against the JSON
// grammar (RFC 8259, strict UTF-8, as nlohmann-json would), the Pod is handed back as
// its text for the ordinary parser (pod_spec.h), and each node name as two views: its
// text as written between the quotes (valid JSON string content, to be copied into a
// reply as it is) and its value (the same bytes unless it has escapes).
//
// 5000 node names: one pass over ~100 KB and no allocation per name, where a JSON tree
// costs a string and a node per name.
//
// Pure; O(size of the body). Views point into the body or into the result's own
// storage: keep both alive while using them.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/status.h"

namespace gs::scheduler {

struct ExtenderArgs {
  std::string_view pod;                 // the "Pod" value's JSON text (an object)
  std::vector<std::string_view> names;  // "NodeNames", decoded
  std::vector<std::string_view> raw;    // parallel: as written, between the quotes
  std::deque<std::string> decoded;      // values of names that had escapes
};

// The errors name what is wrong in words a kube-scheduler log reader can act on
// ("ExtenderArgs: not a JSON object", "... no \"Pod\" object", "... no \"NodeNames\" ...
// nodeCacheCapable", "... not an array", "... entry is not a string"). When a key is
// repeated the last one counts.
Status ParseExtenderArgs(std::string_view body, ExtenderArgs* out);

// Appends `s` as a JSON string literal: quotes, backslashes and control characters
// escaped; other bytes as they are.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace gs::scheduler
