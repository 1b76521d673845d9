# cmake -DBUILD_DIR= -DSTAGE= -DPREFIX= -DLIBDIR= -DVERSION= -DSOURCE_DIR= -P install_check.cmake
# Installs BUILD_DIR with DESTDIR=STAGE and PREFIX, one component at a time
# (so that install_manifest.txt, which `make uninstall` reads, stays the
# user's own); checks the files, the symlink chain and the soname;
# uninstalls and checks nothing is left; installs again for the consumers.
set(root ${STAGE}${PREFIX})
set(components hakmem_runtime hakmem_development)
string(REGEX MATCH "^[0-9]+" major ${VERSION})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "FAIL: ${ARGN}: ${rc}\n${out}")
  endif()
endfunction()

function(install_stage)
  foreach(c IN LISTS components)
    run(${CMAKE_COMMAND} -E env DESTDIR=${STAGE} ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} --component ${c})
  endforeach()
endfunction()

file(REMOVE_RECURSE ${STAGE})
install_stage()

set(expected
  bin/hakmem
  include/hakmem.h
  ${LIBDIR}/libhakmem.so.${VERSION}
  ${LIBDIR}/libhakmem.so.${major}
  ${LIBDIR}/libhakmem.so
  ${LIBDIR}/libhakmem.a
  ${LIBDIR}/libhakmem-secure.so.${VERSION}
  ${LIBDIR}/libhakmem-secure.so.${major}
  ${LIBDIR}/libhakmem-secure.so
  ${LIBDIR}/libhakmem-secure.a
  ${LIBDIR}/pkgconfig/hakmem.pc
  ${LIBDIR}/pkgconfig/hakmem-secure.pc
  ${LIBDIR}/cmake/hakmem/hakmem-config.cmake
  ${LIBDIR}/cmake/hakmem/hakmem-config-version.cmake
  ${LIBDIR}/cmake/hakmem/hakmem-targets.cmake)
foreach(f IN LISTS expected)
  if(NOT EXISTS ${root}/${f})
    message(FATAL_ERROR "FAIL: ${root}/${f} was not installed")
  endif()
endforeach()
# Everything under DESTDIR + prefix, nothing elsewhere in DESTDIR.
file(GLOB_RECURSE all LIST_DIRECTORIES false ${STAGE}/*)
foreach(f IN LISTS all)
  if(NOT f MATCHES "^${root}/")
    message(FATAL_ERROR "FAIL: ${f} installed outside DESTDIR + prefix (${root})")
  endif()
endforeach()
list(LENGTH all count)
message(STATUS "${count} files installed under ${root}")

# lib.so -> lib.so.MAJOR -> lib.so.MAJOR.MINOR.PATCH, soname lib.so.MAJOR, for both variants
foreach(lib IN ITEMS libhakmem libhakmem-secure)
  file(READ_SYMLINK ${root}/${LIBDIR}/${lib}.so dev_link)
  file(READ_SYMLINK ${root}/${LIBDIR}/${lib}.so.${major} soname_link)
  if(NOT dev_link STREQUAL "${lib}.so.${major}" OR NOT soname_link STREQUAL "${lib}.so.${VERSION}")
    message(FATAL_ERROR "FAIL: symlinks ${lib}.so -> ${dev_link}, ${lib}.so.${major} -> ${soname_link}")
  endif()
  execute_process(COMMAND readelf -d ${root}/${LIBDIR}/${lib}.so.${VERSION} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT dynamic MATCHES "SONAME[^\n]*\\[${lib}\\.so\\.${major}\\]")
    message(FATAL_ERROR "FAIL: soname of ${lib}.so.${VERSION} is not ${lib}.so.${major}:\n${dynamic}")
  endif()
endforeach()
file(READ ${root}/include/hakmem.h header)
file(READ ${SOURCE_DIR}/include/hakmem.h source_header)
if(NOT header STREQUAL source_header)
  message(FATAL_ERROR "FAIL: the installed hakmem.h differs from include/hakmem.h")
endif()

# Uninstall: every file goes, under the same DESTDIR.
foreach(c IN LISTS components)
  run(${CMAKE_COMMAND} -E env DESTDIR=${STAGE} ${CMAKE_COMMAND}
      -DMANIFEST=${BUILD_DIR}/install_manifest_${c}.txt -P ${SOURCE_DIR}/cmake/uninstall.cmake)
endforeach()
file(GLOB_RECURSE left LIST_DIRECTORIES false ${STAGE}/*)
if(left)
  message(FATAL_ERROR "FAIL: left after uninstall: ${left}")
endif()

install_stage()
message(STATUS "install, uninstall and install again under ${root}: ok")
