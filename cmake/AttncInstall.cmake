# Installation (included last by the top-level CMakeLists.txt):
#
#   cmake --install BUILD --prefix P
#
# installs
#   P/bin/attnc                        the CLI, where it is built (ATTNC_WITH_CLI)
#   P/lib/libattnc.so                  attnc_runtime, find_package name attnc::runtime
#   P/lib/libattnc_jit.so              attnc_jit, attnc::jit
#   P/lib/libattnc_halidegen.so        the halide backend's generator module (ATTNC_WITH_HALIDE)
#   P/include/attnc/attnc.h, attnc.hpp, attnc_jit.h   the public headers only
#   P/lib/cmake/attnc/                 attncConfig.cmake, attncConfigVersion.cmake, attncTargets*.cmake
#   P/lib/pkgconfig/attnc.pc, attnc-jit.pc
# (lib and include as GNUInstallDirs names them). The static attnc_* layers
# are linked into the shared libraries and not installed. RPATHs are $ORIGIN-relative, so the tree
# still works when moved; libraries outside the build tree that are not in
# the linker's default directories (libMLIR.so and libLLVM.so in
# /usr/lib/llvm-19/lib, with ATTNC_WITH_MLIR) stay where the system put them
# and are found there by absolute RPATH entries. tests/install/check_install.sh checks all of this.

include(CMakePackageConfigHelpers)

set(ATTNC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnc)
# From bin/ to lib/, for the CLI's RPATH ("../lib" by default).
file(RELATIVE_PATH ATTNC_BIN_TO_LIB ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})

# attnc_install_rpath(TARGET ORIGIN-RELATIVE-DIR): the installed copy finds
# attnc's libraries through $ORIGIN and the system's through the directories
# it was linked from.
function(attnc_install_rpath target dir)
  set_target_properties(${target} PROPERTIES
    INSTALL_RPATH "$ORIGIN${dir}"
    INSTALL_RPATH_USE_LINK_PATH ON)
endfunction()

set_target_properties(attnc_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(attnc_jit PROPERTIES EXPORT_NAME jit)
attnc_install_rpath(attnc_runtime "")
attnc_install_rpath(attnc_jit "")
install(TARGETS attnc_runtime attnc_jit
  EXPORT attncTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The JIT opens the generator module by name when the build tree's copy is
# gone; libattnc_jit.so's $ORIGIN RPATH finds it next to it.
if(TARGET attnc_halidegen)
  attnc_install_rpath(attnc_halidegen "")
  install(TARGETS attnc_halidegen LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

if(TARGET attnc)
  attnc_install_rpath(attnc "/${ATTNC_BIN_TO_LIB}")
  install(TARGETS attnc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# The public headers; never runtime/include/attnc/runtime/Internal.h.
install(FILES
    ${PROJECT_SOURCE_DIR}/runtime/include/attnc/attnc.h
    ${PROJECT_SOURCE_DIR}/runtime/include/attnc/attnc.hpp
    ${PROJECT_SOURCE_DIR}/jit/include/attnc/attnc_jit.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnc)

# find_package(attnc): attnc::runtime and attnc::jit. 0.x releases are
# compatible within a minor version only.
install(EXPORT attncTargets
  NAMESPACE attnc::
  DESTINATION ${ATTNC_INSTALL_CMAKEDIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/attncConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/attncConfig.cmake
  INSTALL_DESTINATION ${ATTNC_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/cmake/attncConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
    ${PROJECT_BINARY_DIR}/cmake/attncConfig.cmake
    ${PROJECT_BINARY_DIR}/cmake/attncConfigVersion.cmake
  DESTINATION ${ATTNC_INSTALL_CMAKEDIR})

# pkg-config: attnc.pc (-lattnc, the runtime) and attnc-jit.pc (-lattnc_jit,
# requires attnc). The prefix is found from the .pc file's own place
# (${pcfiledir}), so `cmake --install --prefix P` and a moved tree both work;
# only an absolute CMAKE_INSTALL_LIBDIR or INCLUDEDIR is written as it is.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ATTNC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(ATTNC_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH ATTNC_PC_UP "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" ATTNC_PC_UP "${ATTNC_PC_UP}") # "../..", for lib/pkgconfig
  set(ATTNC_PC_PREFIX "\${pcfiledir}/${ATTNC_PC_UP}")
  set(ATTNC_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(ATTNC_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(ATTNC_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/attnc.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/attnc.pc @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/attnc-jit.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/attnc-jit.pc @ONLY)
install(FILES
    ${PROJECT_BINARY_DIR}/pkgconfig/attnc.pc
    ${PROJECT_BINARY_DIR}/pkgconfig/attnc-jit.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
