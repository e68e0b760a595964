# Helpers shared by every attnc target.

set(ATTNC_WARNINGS -Wall -Wextra -Wno-unused-parameter)

# attnc_add_library(NAME SOURCES... [DEPS ...])
function(attnc_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${ATTNC_WARNINGS})
  target_include_directories(${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(ARG_DEPS)
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  endif()
endfunction()

# attnc_use_mlir(TARGET): private MLIR/LLVM includes, definitions and libMLIR.so.
function(attnc_use_mlir target)
  target_include_directories(${target} SYSTEM PRIVATE ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
  separate_arguments(defs NATIVE_COMMAND ${LLVM_DEFINITIONS})
  target_compile_definitions(${target} PRIVATE ${defs})
  if(NOT LLVM_ENABLE_RTTI)
    # Only the TUs that include MLIR headers lose RTTI; they must not throw
    # or catch attnc exceptions across that boundary.
    target_compile_options(${target} PRIVATE -fno-rtti)
  endif()
  target_link_libraries(${target} PRIVATE MLIR LLVM)
endfunction()

# attnc_add_test(NAME SOURCES... DEPS ...)
function(attnc_add_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${ATTNC_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    ATTNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    ATTNC_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
endfunction()
