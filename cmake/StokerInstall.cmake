# What `cmake --install build --prefix P` lays out, for programs built outside this tree and for the images
# (docker/stage-build.sh):
#   P/bin                 stoker, stoker-coordinator, stoker-worker
#   P/include/stoker      the public headers (include/stoker/: they include only each other and the standard library)
#   P/lib                 libstoker.so (the C++ API, SONAME libstoker.so.MAJOR.MINOR) and libstoker_c.so (the C ABI)
#   P/lib/cmake/stoker    the CMake package: find_package(stoker) gives stoker::client and stoker::c
#   P/lib/pkgconfig       stoker.pc (pkg-config --cflags --libs stoker: libstoker.so)
# Tests, benchmarks and the static layers are not installed. tests/install/install_test.py installs into a
# temporary prefix and builds programs against it.
include(CMakePackageConfigHelpers)
set(STOKER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stoker)

install(TARGETS stoker stoker-coordinator stoker-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS stoker_client_shared stoker_c EXPORT stokerTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/stoker DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT stokerTargets NAMESPACE stoker:: DESTINATION ${STOKER_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/stokerConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/stokerConfig.cmake INSTALL_DESTINATION ${STOKER_CMAKE_DIR})
# Before 1.0 a minor release may change the API: a package satisfies a request for the same MAJOR.MINOR only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/stokerConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/stokerConfig.cmake ${PROJECT_BINARY_DIR}/package/stokerConfigVersion.cmake
        DESTINATION ${STOKER_CMAKE_DIR})

# The .pc file finds the prefix from its own place (${pcfiledir}), so it is right for whatever --prefix installs it.
file(RELATIVE_PATH STOKER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" STOKER_PC_TO_PREFIX "${STOKER_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/stoker.pc.in ${PROJECT_BINARY_DIR}/package/stoker.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/stoker.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
