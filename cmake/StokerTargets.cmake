# Helpers that give every stoker target the same warnings, sanitizers and test registration.

# stoker_target_defaults(target [UNCHECKED_LOCKS]): under clang the lock annotations (base/sync.h: STOKER_GUARDED_BY,
# STOKER_REQUIRES, ...) are checked by -Wthread-safety as errors (GCC, the main build's compiler, ignores them; the
# sanitizer trees are clang's). Tests, test support and benchmarks reach into guarded state on purpose: they are
# UNCHECKED_LOCKS, as is everything in tests/ and bench/.
function(stoker_target_defaults target)
  cmake_parse_arguments(ARG "UNCHECKED_LOCKS" "" "" ${ARGN})
  stoker_current_folder(folder)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND NOT ARG_UNCHECKED_LOCKS AND NOT folder MATCHES "^(tests|bench)$")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety -Wthread-safety-beta
                                                                      -Werror=thread-safety -Werror=thread-safety-beta>)
  endif()
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
                              -Wimplicit-fallthrough -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${STOKER_WERROR}>>:-Werror>
    # GCC 12 at -O3 (Release) reports std::string copies it inlined as overlapping or uninitialised (known false
    # positives of GCC 12; seen in tests of a Release build): still shown, never fatal.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-error=restrict -Wno-error=maybe-uninitialized>)
  if(STOKER_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${STOKER_SANITIZE}
                                                                      -fno-omit-frame-pointer>)
    target_link_options(${target} PUBLIC -fsanitize=${STOKER_SANITIZE})
  endif()
  if(STOKER_FUZZ)  # coverage for libFuzzer everywhere; only the fuzz targets link its main
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
  endif()
endfunction()

# stoker_include_root(target folder): `target` and what links it may include "<folder>/..." and nothing else of the
# tree. Each folder's include root is a directory in the build tree holding one link, to that folder: a target sees
# the folders of the targets it links, so an include of a higher layer (or of a component it does not link) fails
# to compile. The public API (include/stoker/) comes from stoker::api. scripts/check-layers.py checks the headers no
# translation unit of their own folder compiles.
function(stoker_include_root target folder)
  set(root ${PROJECT_BINARY_DIR}/include-roots/${folder})
  if(NOT EXISTS ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC ${root})
endfunction()

# The top-level folder of the CMakeLists.txt being read: "worker" for worker/CMakeLists.txt.
function(stoker_current_folder out)
  file(RELATIVE_PATH relative ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "/.*" "" folder "${relative}")
  set(${out} ${folder} PARENT_SCOPE)
endfunction()

# stoker_library(name SOURCES ... PUBLIC_DEPS ... PRIVATE_DEPS ...): a static library stoker::name whose include
# root is its folder.
function(stoker_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  add_library(stoker::${name} ALIAS ${name})
  stoker_current_folder(folder)
  stoker_include_root(${name} ${folder})
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  stoker_target_defaults(${name})
endfunction()

# stoker_test(name SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s]): one gtest binary whose cases CTest discovers
# one by one (as "<name>.<Suite>.<Case>"), so `ctest -j` spreads them over the cores and a failure names its case.
# LABELS default to "unit"; TIMEOUT (default 120 s) is per case. COST (default 0) orders a fresh build's first run:
# `ctest -j` starts cases of higher cost first, so long ones do not trail at the end (later runs use measured times).
include(GoogleTest)
function(stoker_test name)
  if(NOT STOKER_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT;COST" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  stoker_target_defaults(${name} UNCHECKED_LOCKS)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_COST)
    set(ARG_COST 0)
  endif()
  gtest_discover_tests(${name} TEST_PREFIX "${name}." DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}" COST ${ARG_COST}
               ENVIRONMENT "STOKER_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
endfunction()
