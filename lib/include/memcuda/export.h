// SPDX-FileCopyrightText: 2026 The memcuda Authors
// SPDX-License-Identifier: Apache-2.0

// Symbol export for libmemcuda: everything is hidden unless marked MCD_API. In C++ with GCC the
// standard attribute form is used, so that it combines with [[nodiscard]] in one declaration
// (`class [[nodiscard]] MCD_API Status`), which GCC refuses for __attribute__ and __declspec.
#pragma once

#if defined(_WIN32)
#if defined(__GNUC__) && defined(__cplusplus)
#if defined(MCD_BUILDING_LIBRARY)
#define MCD_API [[gnu::dllexport]]
#else
#define MCD_API [[gnu::dllimport]]
#endif
#elif defined(MCD_BUILDING_LIBRARY)
#define MCD_API __declspec(dllexport)
#else
#define MCD_API __declspec(dllimport)
#endif
#elif defined(__cplusplus)
#define MCD_API [[gnu::visibility("default")]]
#else
#define MCD_API __attribute__((visibility("default")))  // the C ABI's header, from C
#endif
