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
  ${LIBDIR}/pkgconfig/hakmem.pc
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

# libhakmem.so -> libhakmem.so.MAJOR -> libhakmem.so.MAJOR.MINOR.PATCH, soname libhakmem.so.MAJOR
file(READ_SYMLINK ${root}/${LIBDIR}/libhakmem.so dev_link)
file(READ_SYMLINK ${root}/${LIBDIR}/libhakmem.so.${major} soname_link)
if(NOT dev_link STREQUAL "libhakmem.so.${major}" OR NOT soname_link STREQUAL "libhakmem.so.${VERSION}")
  message(FATAL_ERROR "FAIL: symlinks libhakmem.so -> ${dev_link}, libhakmem.so.${major} -> ${soname_link}")
endif()
execute_process(COMMAND readelf -d ${root}/${LIBDIR}/libhakmem.so.${VERSION} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT dynamic MATCHES "SONAME[^\n]*\\[libhakmem\\.so\\.${major}\\]")
  message(FATAL_ERROR "FAIL: soname of libhakmem.so.${VERSION} is not libhakmem.so.${major}:\n${dynamic}")
endif()
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
