// What a client (any pod on the node may connect) sends to the node agent's /metrics and
// /healthz server (src/node/http_server.h FrameHttpRequest, ParseHttpRequest), received
// as a connection receives it: in pieces, framed after each one, parsed once the headers
// are complete.
//
// Input: byte 0 sets the size of the pieces (1 + 8 x byte 0 bytes, at most the server's
// 2 KiB read buffer); the rest is the byte stream. Its end is the client closing.
//
// Checked: the headers are complete exactly when "\r\n\r\n" has arrived, too large only
// past 8 KiB without it, and never read beyond one piece past the limit; a parsed request
// is refused with 400 or 405 and a body ending in a newline, or is a GET or HEAD whose
// path is its target up to the query string: the request line is METHOD SP target SP
// HTTP/..., the path holds no '?' and no CR LF (it selects a handler by exact match).
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "src/node/http_server.h"

using gs::node::FrameHttpRequest;
using gs::node::HttpFraming;
using gs::node::HttpRequest;
using gs::node::ParseHttpRequest;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + 8 * static_cast<size_t>(data[0]);
  std::string_view stream = gs::fuzz::AsText(data + 1, size - 1);
  std::string received;
  HttpFraming f;
  while ((f = FrameHttpRequest(received)) == HttpFraming::kMore) {
    GS_FUZZ_CHECK(received.size() <= 8192 && received.find("\r\n\r\n") == std::string::npos);
    if (stream.empty()) return 0;  // the client closed first: no answer (400, unsent)
    size_t n = std::min({piece, size_t{2048}, stream.size()});
    received.append(stream.substr(0, n));
    stream.remove_prefix(n);
  }
  if (f == HttpFraming::kTooLarge) {
    GS_FUZZ_CHECK(received.size() > 8192 && received.size() <= 8192 + 2048);
    GS_FUZZ_CHECK(received.find("\r\n\r\n") == std::string::npos);
    return 0;
  }
  GS_FUZZ_CHECK(received.find("\r\n\r\n") != std::string::npos);

  HttpRequest r = ParseHttpRequest(received);
  std::string_view line = std::string_view(received).substr(0, received.find("\r\n"));
  if (r.status != 0) {
    GS_FUZZ_CHECK(r.status == 400 || r.status == 405);
    GS_FUZZ_CHECK(!r.error.empty() && r.error.back() == '\n');
    GS_FUZZ_CHECK(r.path.empty());
    if (r.status == 405) {  // well formed, another method
      std::string_view method = line.substr(0, line.find(' '));
      GS_FUZZ_CHECK(method != "GET" && method != "HEAD");
    }
    return 0;
  }
  GS_FUZZ_CHECK(r.error.empty());
  GS_FUZZ_CHECK(r.path.find('?') == std::string::npos && r.path.find("\r\n") == std::string::npos);
  std::string_view method = r.head ? "HEAD" : "GET";
  // METHOD SP path [? query] SP HTTP/...
  GS_FUZZ_CHECK(line.substr(0, method.size() + 1) == std::string(method) + " ");
  std::string_view rest = line.substr(method.size() + 1);
  GS_FUZZ_CHECK(rest.substr(0, r.path.size()) == r.path);
  rest.remove_prefix(r.path.size());
  size_t last = rest.rfind(' ');
  GS_FUZZ_CHECK(last != std::string_view::npos && rest.substr(last + 1, 5) == "HTTP/");
  GS_FUZZ_CHECK(last == 0 || rest[0] == '?');
  return 0;
}
