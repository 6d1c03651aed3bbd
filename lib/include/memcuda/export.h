// Symbol export for libmemcuda: everything is hidden unless marked MCD_API.
#pragma once

#if defined(_WIN32)
#  if defined(MCD_BUILDING_LIBRARY)
#    define MCD_API __declspec(dllexport)
#  else
#    define MCD_API __declspec(dllimport)
#  endif
#elif defined(__cplusplus)
// The standard attribute form, so that it combines with [[nodiscard]] in one declaration
// (`class [[nodiscard]] MCD_API Status`), which GCC refuses for __attribute__.
#  define MCD_API [[gnu::visibility("default")]]
#else
#  define MCD_API __attribute__((visibility("default")))  // the C ABI's header, from C
#endif
