// Parsing of byte quantities and small numbers from outside text (env, flags, YAML).
//
// The one parser every part uses, so "4g" means the same to the enforcer, the node
// agent and the CLI. Allocation-free and locale-free: safe inside injected libraries.
// Accepted: digits with an optional suffix, any case: k/m/g/t (powers of 1024, as
// HAMi-core reads CUDA_DEVICE_MEMORY_LIMIT), ki/mi/gi/ti and kib/mib/gib/tib (the same),
// b (bytes); no suffix means bytes. Kubernetes' decimal "K/M/G" is not accepted in this
// form on purpose: HAMi's contract is binary.
#pragma once

#include <cstdint>

namespace gs {

// Returns true and sets *bytes on success; false on empty input, junk, or overflow.
bool ParseByteQuantity(const char* text, uint64_t* bytes);

// Parses a non-negative decimal integer with no suffix (e.g. percent, priority).
bool ParseUnsigned(const char* text, uint64_t* value);

// Formats bytes as "80.0 GiB" / "512 MiB" into buf; returns buf.
const char* FormatBytes(uint64_t bytes, char* buf, unsigned long size);

}  // namespace gs
