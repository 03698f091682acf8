// Standard base64 (RFC 4648, with padding), as Kubernetes writes []byte fields: the
// kubeconfig's *-data fields, Secret data, an AdmissionReview's patch.
//
// Used by config.cc and the admission webhook. Pure and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "src/common/status.h"

namespace gs::kube {

std::string Base64Encode(std::string_view bytes);
// Whitespace (line breaks in a pasted value) is skipped; anything else outside the
// alphabet, or a bad length or padding, is an error.
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace gs::kube
