// Symbol export for libmemcuda: everything is hidden unless marked MCD_API.
#pragma once

#if defined(_WIN32)
#  if defined(MCD_BUILDING_LIBRARY)
#    define MCD_API __declspec(dllexport)
#  else
#    define MCD_API __declspec(dllimport)
#  endif
#else
#  define MCD_API __attribute__((visibility("default")))
#endif
