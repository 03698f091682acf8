#include "src/enforcer/real_dl.h"

#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstring>

namespace gs::enforcer {
namespace {

struct Lookup {
  const char* name;
  void* found;
};

uint32_t GnuHash(const char* s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

// Some architectures leave the dynamic section's addresses unrelocated.
template <typename T>
const T* At(const dl_phdr_info* info, ElfW(Addr) ptr) {
  return reinterpret_cast<const T*>(ptr < info->dlpi_addr ? info->dlpi_addr + ptr : ptr);
}

int FindInObject(dl_phdr_info* info, size_t, void* data) {
  auto* q = static_cast<Lookup*>(data);
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, "libc.so.", 8) != 0 && strncmp(base, "libdl.so.", 9) != 0) return 0;
  const ElfW(Dyn)* dyn = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (dyn == nullptr) return 0;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const ElfW(Half)* versym = nullptr;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_SYMTAB) symtab = At<ElfW(Sym)>(info, d->d_un.d_ptr);
    if (d->d_tag == DT_STRTAB) strtab = At<char>(info, d->d_un.d_ptr);
    if (d->d_tag == DT_GNU_HASH) gnu_hash = At<uint32_t>(info, d->d_un.d_ptr);
    if (d->d_tag == DT_VERSYM) versym = At<ElfW(Half)>(info, d->d_un.d_ptr);
  }
  if (symtab == nullptr || strtab == nullptr || gnu_hash == nullptr) return 0;
  uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_size = gnu_hash[2];
  const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(gnu_hash + 4);
  const uint32_t* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
  const uint32_t* chain = buckets + nbuckets;
  uint32_t h = GnuHash(q->name);
  for (uint32_t i = buckets[h % nbuckets]; i >= symoffset && i != 0; ++i) {
    uint32_t ch = chain[i - symoffset];
    const ElfW(Sym)& s = symtab[i];
    // The default version of the name: not a hidden (compat) one.
    bool hidden = versym != nullptr && (versym[i] & 0x8000) != 0;
    if ((ch | 1) == (h | 1) && !hidden && s.st_shndx != SHN_UNDEF && strcmp(strtab + s.st_name, q->name) == 0) {
      q->found = reinterpret_cast<void*>(info->dlpi_addr + s.st_value);
      return 1;
    }
    if (ch & 1) break;
  }
  return 0;
}

void* FindInCLibrary(const char* name) {
  Lookup q{name, nullptr};
  dl_iterate_phdr(FindInObject, &q);
  return q.found;
}

}  // namespace

DlsymFn RealDlsym() {
  static const DlsymFn real = reinterpret_cast<DlsymFn>(FindInCLibrary("dlsym"));
  return real;
}

DlvsymFn RealDlvsym() {
  static const DlvsymFn real = reinterpret_cast<DlvsymFn>(FindInCLibrary("dlvsym"));
  return real;
}

}  // namespace gs::enforcer
