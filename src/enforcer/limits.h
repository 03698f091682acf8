// The effective limits of this process's devices, and which region device a card is.
// One place answers "what is this device's limit" for every view (cuMemGetInfo,
// cuDeviceTotalMem, NVML) and every charge, so they cannot disagree.
//
// Where limits come from: the configuration only (the read-only limits file, which the
// environment may only tighten; src/enforcer/config.h), never the region, which every
// process of the container can write. A card is bound to its limits by its UUID when the
// limits file names cards (GPUSLICE_DEVICE_UUID_<i>), else by its position among the
// visible devices; the region index of a card is that same index, so renaming a device in
// the region cannot move a card to an index without a limit or to fresh accounting.
//
// Thread-safety: the functions read the immutable configuration and atomics; BindDevice
// is called under the region lock. Cost: a load and compare.
#pragma once

#include <cstdint>

#include "src/region/region.h"

namespace gs::enforcer {

// Bytes this device may hold for the container; 0 = no limit.
uint64_t MemoryLimit(int dev);
// Compute share of this device in percent; 0 = none.
unsigned SmShare(int dev);
// The tenant entry of this device's card region the host handed the container; -1 = none.
int CardEntry(int dev);
// Whether any device has a memory limit: then a call whose device cannot be told is
// refused instead of running uncounted.
bool AnyMemoryLimit();
// Whether the limits name their cards (GPUSLICE_DEVICE_UUID_<i>): then a card they do not
// name is not granted (enforcer.h, NotGranted).
bool CardsNamed();

// The region index for the card `uuid` seen at position `visible_index` (CUDA ordinal or
// NVML index), written into the region's table; -1 when the limits file names cards and
// this is not one of them (its calls are then refused when a limit exists). Called under
// the region lock.
int BindDevice(region::Region* r, const char* uuid, int visible_index);

// What a limited device reports: total = its limit, used = the container's charged use,
// free = total - used (never negative), and never more free than the card has
// (physical_free), unless oversubscribing. False when the device has no limit (the
// driver's own figures stand).
bool LimitedView(int dev, uint64_t physical_total, uint64_t physical_free, region::MemoryView* out);

}  // namespace gs::enforcer
