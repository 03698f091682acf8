// The node agent's allocation records as a damaged disk may leave them
// (src/node/slice_book.h SliceBook::Load): a state directory made from the input, loaded
// as the agent does at start.
//
// Input: the snapshot (allocations.json), a line "----", the journal (allocations.log),
// a line "----", the names of the container directories present, one a line (each holds
// a `limits` file). A part that is exactly NOFILE leaves that file out.
//
// Checked:
// - Load never throws (libFuzzer reports an escaping exception) and every record it
//   loads names a plain directory (one path component: the agent removes and renames
//   <state>/containers/<id>);
// - an error names the damaged file, and the damage is kept for the operator: the
//   snapshot that did not parse as allocations.json.damaged, byte for byte, the journal
//   (less a torn last line) as allocations.log.damaged; without an error no *.damaged;
// - nothing is lost: the container directories are untouched, the journal loses at most
//   its torn last line, and a restart (a second Load of the same directory) loads without
//   error the same records, so what the first Load read was kept.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "src/common/raw_log.h"
#include "src/node/slice_book.h"

namespace fs = std::filesystem;

namespace {

// Every file and directory under `root` (relative path -> content, "<dir>" for a
// directory, "<other>" for anything else); links are not followed.
std::map<std::string, std::string> Tree(const std::string& root) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string rel = fs::relative(it->path(), root, ec).string();
    auto st = it->symlink_status(ec);
    if (fs::is_directory(st))
      out[rel] = "<dir>";
    else if (fs::is_regular_file(st))
      out[rel] = gs::fuzz::ReadFile(it->path().string());
    else
      out[rel] = "<other>";
  }
  return out;
}

std::map<std::string, std::vector<std::string>> Records(const gs::node::SliceBook& b) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& r : b.Records()) out[r.id] = r.device_ids;
  return out;
}

bool PlainName(const std::string& id) {
  return !id.empty() && id != "." && id != ".." && id.find('/') == std::string::npos &&
         id.find('\0') == std::string::npos;
}

std::unique_ptr<gs::node::SliceBook> Book(const std::string& dir) {
  gs::model::SplitPolicy p;
  p.split_count = 4;
  return std::make_unique<gs::node::SliceBook>(std::vector<gs::model::Gpu>{{"GPU-a", 0, "T4", 16ull << 30, 0, 0, true}},
                                               p, dir);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gs::SetRawLogLevel(-1);  // a torn tail is logged at every load
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = gs::fuzz::ScratchDir() + "/state";
  const std::string snapshot = dir + "/allocations.json", journal = dir + "/allocations.log";
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir + "/containers", ec);
  auto parts = gs::fuzz::SplitParts(gs::fuzz::AsText(data, size), 3);
  parts.resize(3, "NOFILE");
  if (parts[0] != "NOFILE") gs::fuzz::WriteFile(snapshot, parts[0]);
  if (parts[1] != "NOFILE") gs::fuzz::WriteFile(journal, parts[1]);
  if (parts[2] != "NOFILE")
    for (const std::string& name : gs::fuzz::Lines(parts[2]))
      if (PlainName(name) && name.size() < 200 && fs::create_directory(dir + "/containers/" + name, ec))
        gs::fuzz::WriteFile(dir + "/containers/" + name + "/limits", "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n");
  const auto containers_before = Tree(dir + "/containers");
  std::string journal_kept(parts[1]);  // what a load keeps of the journal: up to its last newline
  journal_kept.resize(journal_kept.rfind('\n') == std::string::npos ? 0 : journal_kept.rfind('\n') + 1);

  auto book = Book(dir);
  gs::Status s = book->Load();
  auto loaded = Records(*book);
  for (const auto& [id, devices] : loaded) GS_FUZZ_CHECK(PlainName(id));
  book.reset();

  bool found = false;
  std::string snapshot_kept = gs::fuzz::ReadFile(snapshot + ".damaged", &found);
  if (found) {
    GS_FUZZ_CHECK(parts[0] != "NOFILE" && snapshot_kept == parts[0]);
    GS_FUZZ_CHECK(!s.ok() && s.message().find(snapshot) != std::string::npos);
  }
  std::string journal_copy = gs::fuzz::ReadFile(journal + ".damaged", &found);
  if (found) {
    GS_FUZZ_CHECK(parts[1] != "NOFILE" && journal_copy == journal_kept);
    GS_FUZZ_CHECK(!s.ok());
  }
  if (!s.ok()) {
    GS_FUZZ_CHECK(s.message().find(snapshot) != std::string::npos || s.message().find(journal) != std::string::npos);
    GS_FUZZ_CHECK(fs::exists(snapshot + ".damaged") || fs::exists(journal + ".damaged"));
  }
  GS_FUZZ_CHECK(Tree(dir + "/containers") == containers_before);

  // A restart: the records the first load read were kept, and nothing is damaged now.
  auto again = Book(dir);
  gs::Status s2 = again->Load();
  GS_FUZZ_CHECK(s2.ok());
  GS_FUZZ_CHECK(Records(*again) == loaded);
  GS_FUZZ_CHECK(Tree(dir + "/containers") == containers_before);
  return 0;
}
