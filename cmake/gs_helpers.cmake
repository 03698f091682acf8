# Small helpers so every folder declares its targets in a few lines.
#
#   gs_library(NAME name SRCS ... [DEPS ...] [INJECTED])   static library, position-independent;
#                                                           INJECTED: also built as code for the
#                                                           injected shared libraries (gs_base,
#                                                           gs_region, gs_sim_core, ...), the only
#                                                           kind those may link
#   gs_test(NAME name SRCS ... [DEPS ...] [LABELS ...] [TIMING gtest-filter])
#                                                           GoogleTest binary, registered with CTest;
#                                                           TIMING's tests run alone, label `timing`
#   gs_version_script(OUT file DEFS def... MACROS m...)     ld version script exporting the
#                                                           first argument of each macro row

# Compile flags of code that is injected into other people's processes.
set(GS_INJECTED_FLAGS -fvisibility=hidden -fvisibility-inlines-hidden -fno-exceptions -fno-rtti)

function(gs_library)
  cmake_parse_arguments(GS "INJECTED" "NAME" "SRCS;DEPS" ${ARGN})
  if(GS_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "gs_library(${GS_NAME}): unknown arguments ${GS_UNPARSED_ARGUMENTS}")
  endif()
  add_library(${GS_NAME} STATIC ${GS_SRCS})
  target_include_directories(${GS_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${GS_NAME} PUBLIC ${GS_DEPS})
  set_target_properties(${GS_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  if(GS_INJECTED)
    target_compile_options(${GS_NAME} PRIVATE ${GS_INJECTED_FLAGS})
    set_target_properties(${GS_NAME} PROPERTIES GS_INJECTED TRUE)
  endif()
endfunction()

function(gs_test)
  if(NOT GS_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(GS "" "NAME;TIMING" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT GS_LABELS)
    set(GS_LABELS unit)
  endif()
  add_executable(${GS_NAME} ${GS_SRCS})
  if("unit" IN_LIST GS_LABELS)
    set_property(GLOBAL APPEND PROPERTY GS_UNIT_TESTS ${GS_NAME})
  endif()
  target_include_directories(${GS_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${GS_NAME} PRIVATE ${GS_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  # GCC 12 at -O3 (Release) reports an impossible overlap in the memcpy it inlines for
  # `"literal" + std::string` (-Wrestrict, a false positive fixed in GCC 13); tests build
  # names that way everywhere. The libraries keep the warning (they avoid the pattern).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${GS_NAME} PRIVATE -Wno-restrict)
  endif()
  if(GS_TIMING)
    # Tests that assert on the wall clock (compute shares): labelled `timing` and run with
    # nothing else beside them, so the rest of the suite never competes with a measurement.
    # One label: a list value does not survive discovery's POST_BUILD command line.
    gtest_discover_tests(${GS_NAME} TEST_FILTER "${GS_TIMING}" PROPERTIES LABELS timing RUN_SERIAL TRUE
                         DISCOVERY_TIMEOUT 30)
    gtest_discover_tests(${GS_NAME} TEST_FILTER "-${GS_TIMING}" PROPERTIES LABELS "${GS_LABELS}" DISCOVERY_TIMEOUT 30)
  else()
    gtest_discover_tests(${GS_NAME} PROPERTIES LABELS "${GS_LABELS}" DISCOVERY_TIMEOUT 30)
  endif()
endfunction()

function(gs_version_script)
  cmake_parse_arguments(GS "" "OUT" "DEFS;MACROS" ${ARGN})
  set(names "")
  foreach(def ${GS_DEFS})
    file(STRINGS ${def} lines)
    foreach(line ${lines})
      foreach(macro ${GS_MACROS})
        if(line MATCHES "^${macro}\\(([A-Za-z_][A-Za-z0-9_ *]*), *([A-Za-z_][A-Za-z0-9_]*)" AND macro STREQUAL "GS_NVML_SYM")
          list(APPEND names "${CMAKE_MATCH_2}")
        elseif(line MATCHES "^${macro}\\(([A-Za-z_][A-Za-z0-9_]*)")
          list(APPEND names "${CMAKE_MATCH_1}")
        endif()
      endforeach()
    endforeach()
  endforeach()
  list(JOIN names ";\n    " body)
  file(WRITE ${GS_OUT} "{\n  global:\n    ${body};\n  local: *;\n};\n")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${GS_DEFS})
endfunction()

# Checks that every static library `target` links, directly or not, was built as injected
# code (gs_library(... INJECTED)): the configure fails naming the one that was not.
function(gs_check_injected_deps target lib)
  if(NOT TARGET ${lib})
    return()
  endif()
  get_target_property(type ${lib} TYPE)
  if(type STREQUAL "STATIC_LIBRARY")
    get_target_property(injected ${lib} GS_INJECTED)
    if(NOT injected)
      message(FATAL_ERROR "${target} is injected into other people's processes but links ${lib}, which is not "
                          "built as injected code (gs_library(... INJECTED): no exceptions, no RTTI)")
    endif()
  endif()
  get_target_property(deps ${lib} INTERFACE_LINK_LIBRARIES)
  if(deps)
    foreach(dep IN LISTS deps)
      gs_check_injected_deps(${target} ${dep})
    endforeach()
  endif()
endfunction()

# Flags for the libraries injected into other people's processes: no exceptions or RTTI
# leaking out, hidden symbols, the C++ runtime linked in statically and kept private. Every
# static library they link must be built with the same compile flags (gs_check_injected_deps).
function(gs_injected_library target version_script)
  target_compile_options(${target} PRIVATE ${GS_INJECTED_FLAGS})
  get_target_property(deps ${target} LINK_LIBRARIES)
  foreach(dep IN LISTS deps)
    gs_check_injected_deps(${target} ${dep})
  endforeach()
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL
                      -Wl,--version-script=${version_script} -Wl,-z,defs -Wl,-z,now)
  target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
endfunction()
