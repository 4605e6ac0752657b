#pragma once
// What the binary records about its own build: the project version, the tree's git state and the
// compiler flags, captured by CMake at configure time. Defined in one generated source,
// <build>/harness/build_info.cpp (from harness/build_info.cpp.in), so that a new commit or a
// re-configure recompiles that file only. $DSA_GIT_SHA overrides the sha at run time where it is
// read (harness/report.cpp, tools/cli.cpp), not here.

namespace dsa::build_info {

// CMake's project(VERSION), e.g. "0.3.0".
const char* version();
// `git rev-parse HEAD` at configure time, "-dirty" appended when tracked files had uncommitted
// changes; "" without git or outside a work tree.
const char* git_sha();
// `git describe --always --dirty` at configure time; "unknown" without git or outside a work tree.
const char* git_describe();
// CMAKE_BUILD_TYPE ("" when none).
const char* build_type();
// CMAKE_CXX_FLAGS and the build type's CMAKE_CXX_FLAGS_<TYPE>, untrimmed.
const char* compile_flags();

}  // namespace dsa::build_info
