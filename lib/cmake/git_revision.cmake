# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

# Writes OUT (a header defining MCD_GIT_REVISION) from `git rev-parse` of SOURCE at every build,
# touching it only when the revision changed, so that --version names the revision built from.
execute_process(COMMAND git -C ${SOURCE} rev-parse --short=7 HEAD
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT revision)
  set(revision unknown)
endif()
set(text "#define MCD_GIT_REVISION \"${revision}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
