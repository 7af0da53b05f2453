# Run at every build (common/CMakeLists.txt): writes OUT, a header defining the git commit the
# sources are at, and whether the tree had uncommitted changes, rewriting it only when that
# changed, so that a build after a new commit says the new commit and an unchanged tree
# recompiles nothing. Outside a git checkout (a release tarball) the commit is "unknown".
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse HEAD
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE failed ERROR_QUIET)
if(failed)
  set(commit "unknown")
  set(dirty "false")
else()
  execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes STREQUAL "")
    set(dirty "false")
  else()
    set(dirty "true")
  endif()
endif()
set(text "// Written by cmake/write_build_commit.cmake at build time.\n#pragma once\n#define GRADSYNC_GIT_COMMIT \"${commit}\"\n#define GRADSYNC_GIT_DIRTY ${dirty}\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" before)
endif()
if(NOT before STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
