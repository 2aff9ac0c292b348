# The package engines link (issue 23), installed as component `library`
# (`cmake --install BUILD --component library`; a plain install includes it):
# the headers, libcgdr.a, libcgdr.so, the CMake package (find_package(cgdr
# CONFIG) -> cgdr::cgdr) and the pkg-config files cgdr.pc and cgdr-static.pc.
# README, "Use it from C / C++"; tests/install_consumers.sh builds against it.
include(CMakePackageConfigHelpers)
set(CGDR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/cgdr)
set(CGDR_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(FILES include/cgdr/cgdr.h include/cgdr/cgdr.hpp include/cgdr/decode.hpp include/cgdr/plan.hpp
              include/cgdr/export.h include/cgdr/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cgdr COMPONENT library)
set(CGDR_LIBRARY_TARGETS cgdr)
if(TARGET cgdr_shared)
  list(APPEND CGDR_LIBRARY_TARGETS cgdr_shared)
endif()
install(TARGETS ${CGDR_LIBRARY_TARGETS} EXPORT cgdrTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)

# CMake: the exported targets, the config that finds their dependencies and
# defines cgdr::cgdr, and the version file (any version of the same major
# version will do, as for the C API).
install(EXPORT cgdrTargets NAMESPACE cgdr:: DESTINATION ${CGDR_CMAKE_DIR} COMPONENT library)
configure_package_config_file(cmake/cgdrConfig.cmake.in ${PROJECT_BINARY_DIR}/cgdrConfig.cmake
                              INSTALL_DESTINATION ${CGDR_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cgdrConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cgdrConfig.cmake ${PROJECT_BINARY_DIR}/cgdrConfigVersion.cmake
        DESTINATION ${CGDR_CMAKE_DIR} COMPONENT library)

# pkg-config. What a static link needs besides libcgdr.a: Highway as its .pc
# file says, OpenMP's runtime as CMake found it, and the C++ runtime (what
# the C++ compiler links and the C one does not: libstdc++, libm).
set(CGDR_STATIC_DEPS ${HWY_LDFLAGS})
foreach(lib IN LISTS OpenMP_CXX_LIB_NAMES CMAKE_CXX_IMPLICIT_LINK_LIBRARIES ITEMS m)
  if(NOT lib IN_LIST CMAKE_C_IMPLICIT_LINK_LIBRARIES)
    list(APPEND CGDR_STATIC_DEPS -l${lib})
  endif()
endforeach()
list(REMOVE_DUPLICATES CGDR_STATIC_DEPS)
list(JOIN CGDR_STATIC_DEPS " " CGDR_STATIC_DEPS)
# The prefix is found from the .pc file's own place, so an installed tree
# can move (and `cmake --install --prefix` works without reconfiguring).
file(RELATIVE_PATH CGDR_PC_PREFIX /prefix/${CGDR_PKGCONFIG_DIR} /prefix)
string(REGEX REPLACE "/$" "" CGDR_PC_PREFIX "${CGDR_PC_PREFIX}")
# cgdr.pc: libcgdr.so (libcgdr.a where it is the only one, with --static).
# cgdr-static.pc: libcgdr.a, with libcgdr.so beside it (Highway and OpenMP
# stay shared: Debian ships no libhwy.a).
set(CGDR_PC_NAME cgdr)
set(CGDR_PC_DESCRIPTION "The chunk gated delta rule (Gated DeltaNet linear attention) on CPUs")
set(CGDR_PC_LIBS "-L\${libdir} -lcgdr")
set(CGDR_PC_LIBS_PRIVATE "${CGDR_STATIC_DEPS}")
configure_file(cmake/cgdr.pc.in ${PROJECT_BINARY_DIR}/cgdr.pc @ONLY)
set(CGDR_PC_NAME cgdr-static)
set(CGDR_PC_DESCRIPTION "${CGDR_PC_DESCRIPTION}, linked statically")
set(CGDR_PC_LIBS "\${libdir}/libcgdr.a ${CGDR_STATIC_DEPS}")
set(CGDR_PC_LIBS_PRIVATE "")
configure_file(cmake/cgdr.pc.in ${PROJECT_BINARY_DIR}/cgdr-static.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cgdr.pc ${PROJECT_BINARY_DIR}/cgdr-static.pc
        DESTINATION ${CGDR_PKGCONFIG_DIR} COMPONENT library)
