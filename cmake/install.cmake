# Installing hakmem and finding it again: the install rules (libraries of
# both variants, header, launcher), hakmem.pc and hakmem-secure.pc for
# pkg-config, the CMake package (find_package(hakmem) -> hakmem::hakmem,
# hakmem::hakmem-static, hakmem::hakmem-secure, hakmem::hakmem-secure-static),
# the hakmem launcher and an uninstall target.
#
# Everything installed is relocatable: hakmem.pc, the CMake package and the
# launcher find the rest relative to themselves, so `cmake --install
# --prefix P` (and DESTDIR) works whatever prefix the build was configured
# with.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HAKMEM_SONAME libhakmem.so.${PROJECT_VERSION_MAJOR})
set(HAKMEM_SECURE_SONAME libhakmem-secure.so.${PROJECT_VERSION_MAJOR})

# The launcher, in the build directory beside the library and installed in
# bin/: it looks for the library in ../lib (as installed), then beside itself.
file(RELATIVE_PATH HAKMEM_LIBDIR_FROM_BINDIR ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
configure_file(${PROJECT_SOURCE_DIR}/scripts/hakmem.in ${PROJECT_BINARY_DIR}/hakmem @ONLY)

if(NOT HAKMEM_INSTALL)
  return()
endif()

# hakmem.pc: its prefix is found from its own place (pkg-config's
# ${pcfiledir}), as many levels up as the library directory is deep.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(HAKMEM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
  string(REGEX REPLACE "/$" "" pc_to_prefix "${pc_to_prefix}")
  set(HAKMEM_PC_PREFIX "\${pcfiledir}/${pc_to_prefix}")
endif()
# One .pc file per variant: `pkg-config --libs hakmem-secure` links the
# hardened library.
set(HAKMEM_PC_NAME hakmem)
set(HAKMEM_PC_DESCRIPTION "General-purpose memory allocator (a malloc replacement)")
configure_file(${PROJECT_SOURCE_DIR}/cmake/hakmem.pc.in ${PROJECT_BINARY_DIR}/hakmem.pc @ONLY)
set(HAKMEM_PC_NAME hakmem-secure)
set(HAKMEM_PC_DESCRIPTION "hakmem's hardened variant: a malloc replacement that stops heap misuse")
configure_file(${PROJECT_SOURCE_DIR}/cmake/hakmem.pc.in ${PROJECT_BINARY_DIR}/hakmem-secure.pc @ONLY)

set(HAKMEM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hakmem)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hakmem-config.cmake.in
  ${PROJECT_BINARY_DIR}/hakmem-config.cmake INSTALL_DESTINATION ${HAKMEM_CMAKE_DIR})
# The soname changes with the major version, and so may the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hakmem-config-version.cmake
  COMPATIBILITY SameMajorVersion)

set(HAKMEM_INSTALLED_TARGETS hakmem hakmem_static hakmem_secure hakmem_secure_static)
foreach(target IN LISTS HAKMEM_INSTALLED_TARGETS)
  target_include_directories(${target} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

# Two components: the runtime (libraries and launcher) and the development
# files, as distributions split them.
install(TARGETS ${HAKMEM_INSTALLED_TARGETS} EXPORT hakmem-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT hakmem_runtime NAMELINK_COMPONENT hakmem_development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT hakmem_development)
install(PROGRAMS ${PROJECT_BINARY_DIR}/hakmem DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT hakmem_runtime)
install(FILES ${PROJECT_SOURCE_DIR}/include/hakmem.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT hakmem_development)
install(FILES ${PROJECT_BINARY_DIR}/hakmem.pc ${PROJECT_BINARY_DIR}/hakmem-secure.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT hakmem_development)
install(EXPORT hakmem-targets NAMESPACE hakmem:: DESTINATION ${HAKMEM_CMAKE_DIR}
  COMPONENT hakmem_development)
install(FILES ${PROJECT_BINARY_DIR}/hakmem-config.cmake ${PROJECT_BINARY_DIR}/hakmem-config-version.cmake
  DESTINATION ${HAKMEM_CMAKE_DIR} COMPONENT hakmem_development)

# `make uninstall`: removes what the last install into this build's
# manifest listed (a parent project may have its own target of that name).
if(HAKMEM_TOP_LEVEL)
  add_custom_target(uninstall
    COMMAND ${CMAKE_COMMAND} -DMANIFEST=${PROJECT_BINARY_DIR}/install_manifest.txt
            -P ${PROJECT_SOURCE_DIR}/cmake/uninstall.cmake
    COMMENT "Removing the files listed in install_manifest.txt")
endif()
