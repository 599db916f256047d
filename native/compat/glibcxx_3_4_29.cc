// The one libstdc++ symbol newer than GLIBCXX_3.4.21 that GCC 11+ headers
// make the addon reference: std::__throw_bad_array_new_length()
// (GLIBCXX_3.4.29), called by std::allocator<T>::allocate when n * sizeof(T)
// overflows. Defined here, the link binds it inside the addon and needs no
// GLIBCXX_3.4.29, so the prebuild loads with the libstdc++ of GCC 5+ (Debian
// 11, Ubuntu 20.04, RHEL 8: what Node's official builds need).
// scripts/symbol-ceiling.js fails the prebuild if a newer version creeps in.
// bad_array_new_length derives from bad_alloc, so throwing bad_alloc keeps
// the meaning (and with -fno-exceptions the process ends either way).
// Not -static-libstdc++: that pulls in GLIBC_2.36 symbols instead.
#include <new>

#if defined(__GLIBCXX__)
#include <bits/functexcept.h>

namespace std {
void __throw_bad_array_new_length() { __throw_bad_alloc(); }
}  // namespace std
#endif
