# xgrammar's C++ core (Apache-2.0, github.com/mlc-ai/xgrammar), built from its PyPI source
# distribution: the grammar compiler and token-mask matcher behind structured outputs
# (common/structured). Not vendored: the pinned sdist is fetched once into the build dir
# (pip download, PyPI being the one registry CI reaches), checked against its SHA-256,
# unpacked there and compiled as the static library `xgrammar` with this project's
# compiler and flags (ccache shares the objects between build dirs).
# MOE_XGRAMMAR_SDIST: use this tarball instead of fetching (offline builds).
set(MOE_XGRAMMAR_VERSION 0.2.8)
set(MOE_XGRAMMAR_SHA256 8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80)
set(MOE_XGRAMMAR_SDIST "" CACHE FILEPATH "xgrammar-${MOE_XGRAMMAR_VERSION}.tar.gz (empty: fetched with pip)")

set(_xg_dir ${CMAKE_BINARY_DIR}/_deps/xgrammar)
set(_xg_tar ${_xg_dir}/xgrammar-${MOE_XGRAMMAR_VERSION}.tar.gz)
set(_xg_src ${_xg_dir}/xgrammar-${MOE_XGRAMMAR_VERSION})
if(MOE_XGRAMMAR_SDIST)
  set(_xg_tar ${MOE_XGRAMMAR_SDIST})
endif()

if(NOT EXISTS ${_xg_src}/include/xgrammar/xgrammar.h)
  if(NOT EXISTS ${_xg_tar})
    if(NOT Python3_Interpreter_FOUND)
      message(FATAL_ERROR "xgrammar: no python3 to fetch the sdist with pip; pass -DMOE_XGRAMMAR_SDIST=FILE")
    endif()
    message(STATUS "xgrammar: pip download xgrammar==${MOE_XGRAMMAR_VERSION} (sdist) into ${_xg_dir}")
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -m pip download --quiet --no-deps --no-binary xgrammar
              xgrammar==${MOE_XGRAMMAR_VERSION} -d ${_xg_dir}
      RESULT_VARIABLE _xg_rc OUTPUT_VARIABLE _xg_out ERROR_VARIABLE _xg_err)
    if(NOT _xg_rc EQUAL 0 OR NOT EXISTS ${_xg_tar})
      message(FATAL_ERROR "xgrammar: pip download of the sdist failed (${_xg_rc}): ${_xg_err}\n"
                          "Fetch xgrammar-${MOE_XGRAMMAR_VERSION}.tar.gz from PyPI and pass -DMOE_XGRAMMAR_SDIST=FILE")
    endif()
  endif()
  file(SHA256 ${_xg_tar} _xg_hash)
  if(NOT _xg_hash STREQUAL MOE_XGRAMMAR_SHA256)
    message(FATAL_ERROR "xgrammar: ${_xg_tar} has SHA-256 ${_xg_hash}, expected ${MOE_XGRAMMAR_SHA256}")
  endif()
  file(ARCHIVE_EXTRACT INPUT ${_xg_tar} DESTINATION ${_xg_dir})
endif()

file(GLOB _xg_sources ${_xg_src}/cpp/*.cc ${_xg_src}/cpp/support/*.cc ${_xg_src}/cpp/converter_ext/*.cc)
add_library(xgrammar STATIC ${_xg_sources})
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17)
target_include_directories(xgrammar SYSTEM PUBLIC ${_xg_src}/include ${_xg_src}/3rdparty/picojson
                                                  ${_xg_src}/3rdparty/dlpack/include)
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0 XGRAMMAR_ENABLE_INTERNAL_CHECK=0)
# Third-party code: its warnings are not ours to fix.
target_compile_options(xgrammar PRIVATE -w)
target_link_libraries(xgrammar PUBLIC Threads::Threads)
