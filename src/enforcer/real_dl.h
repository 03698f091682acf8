// glibc's own dlsym and dlvsym. The enforcer exports both (so a program cannot reach the
// driver around its hooks by asking for them), which means neither can be called by name
// from inside it: they are found by reading the dynamic symbol table of the C library
// (libc.so.6, or libdl.so.2 before glibc 2.34) through dl_iterate_phdr, taking the
// default version of each name.
//
// Thread-safety: resolved once (a function-local static), immutable afterwards.
#pragma once

namespace gs::enforcer {

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);

DlsymFn RealDlsym();
DlvsymFn RealDlvsym();

}  // namespace gs::enforcer
