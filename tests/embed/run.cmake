# The `embed` test: installs the built library to a scratch prefix (cmake --install), then
# configures, builds and runs tests/embed/ against that prefix alone, as another project would.
# Usage: cmake -DGL_BUILD_DIR=... -DGL_EMBED_SOURCE=... -DGL_WORK_DIR=... -DGL_GENERATOR=...
#              [-DGL_CXX_COMPILER=...] [-DGL_BUILD_TYPE=...] -P run.cmake
foreach(var GL_BUILD_DIR GL_EMBED_SOURCE GL_WORK_DIR GL_GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(prefix ${GL_WORK_DIR}/prefix)
set(build ${GL_WORK_DIR}/build)
file(REMOVE_RECURSE ${GL_WORK_DIR})

function(step what)
  message(STATUS "embed: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "embed: ${what} failed (${rc})")
  endif()
endfunction()

set(configure_args -S ${GL_EMBED_SOURCE} -B ${build} -G ${GL_GENERATOR} -DCMAKE_PREFIX_PATH=${prefix}
                   -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GL_CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${GL_CXX_COMPILER})
endif()
if(GL_BUILD_TYPE)
  list(APPEND configure_args -DCMAKE_BUILD_TYPE=${GL_BUILD_TYPE})
endif()

step("install to ${prefix}" ${CMAKE_COMMAND} --install ${GL_BUILD_DIR} --prefix ${prefix})
step("configure ${GL_EMBED_SOURCE}" ${CMAKE_COMMAND} ${configure_args})
step("build" ${CMAKE_COMMAND} --build ${build})
step("run against the static library" ${build}/embed-static)
step("run against the shared library" ${build}/embed-shared)
