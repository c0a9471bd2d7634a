// Compiles a region of a file for an instruction set beyond the build's
// baseline, on GCC and clang alike:
//
//   KVSERVE_TARGET_BEGIN("avx512f,avx512vnni")
//   ... functions using those intrinsics ...
//   KVSERVE_TARGET_END
//
// clang has no `#pragma GCC target`; its attribute push does the same. GCC
// 12's avx512fintrin.h self-initialises its "undefined" vectors
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once inlined,
// so the region silences that warning there. Include the intrinsics headers
// before the region.
#pragma once

#define KVSERVE_PRAGMA(text) _Pragma(#text)

#if defined(__clang__)
#define KVSERVE_TARGET_BEGIN(isa) \
  KVSERVE_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define KVSERVE_TARGET_END KVSERVE_PRAGMA(clang attribute pop)
#else
#define KVSERVE_TARGET_BEGIN(isa)     \
  KVSERVE_PRAGMA(GCC push_options)    \
  KVSERVE_PRAGMA(GCC target(isa))     \
  KVSERVE_PRAGMA(GCC diagnostic push) \
  KVSERVE_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized")
#define KVSERVE_TARGET_END KVSERVE_PRAGMA(GCC diagnostic pop) KVSERVE_PRAGMA(GCC pop_options)
#endif
