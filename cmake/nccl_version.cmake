# The version of an nccl.h, and whether ember's nccl backend can use it: dist/nccl_backend.cpp calls
# ncclCommFinalize, ncclGetLastError and non-blocking communicators (ncclConfig_t, ncclInProgress),
# all from NCCL 2.14. Used by the top-level CMakeLists.txt and by its ctest entry
# (tests/nccl_version/, cmake -P with fixture headers).
set(EMBER_NCCL_MIN_VERSION 2.14.0)

# ember_nccl_version(<nccl.h> <out-version> <out-ok>): "MAJOR.MINOR.PATCH" (empty when the header
# has no version) and whether it is at least EMBER_NCCL_MIN_VERSION.
function(ember_nccl_version header out_version out_ok)
  file(STRINGS "${header}" defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
  set(major "")
  set(minor "")
  set(patch "")
  foreach(line ${defines})
    if(line MATCHES "^#define NCCL_MAJOR[ \t]+([0-9]+)")
      set(major ${CMAKE_MATCH_1})
    elseif(line MATCHES "^#define NCCL_MINOR[ \t]+([0-9]+)")
      set(minor ${CMAKE_MATCH_1})
    elseif(line MATCHES "^#define NCCL_PATCH[ \t]+([0-9]+)")
      set(patch ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(major STREQUAL "" OR minor STREQUAL "")
    set(${out_version} "" PARENT_SCOPE)
    set(${out_ok} FALSE PARENT_SCOPE)
    return()
  endif()
  if(patch STREQUAL "")
    set(patch 0)
  endif()
  set(v "${major}.${minor}.${patch}")
  set(${out_version} "${v}" PARENT_SCOPE)
  if(v VERSION_LESS EMBER_NCCL_MIN_VERSION)
    set(${out_ok} FALSE PARENT_SCOPE)
  else()
    set(${out_ok} TRUE PARENT_SCOPE)
  endif()
endfunction()
