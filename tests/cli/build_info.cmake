# cmake/GlBuildInfo.cmake on three scratch source folders: a git checkout of its own (the header
# names its HEAD commit), a plain folder (no commit), and a folder inside another checkout (no
# commit: the enclosing project's commit is not ours). Run with -DGL_MODULE_DIR=<cmake/> -DWORK=<dir>.
find_package(Git REQUIRED)
file(REMOVE_RECURSE "${WORK}")

# include(GlBuildInfo) as the top CMakeLists runs it, for a source folder; the header written.
function(build_info source out)
  set(PROJECT_SOURCE_DIR "${source}")
  set(PROJECT_BINARY_DIR "${source}/build")
  set(PROJECT_VERSION "9.8.7")
  include(${GL_MODULE_DIR}/GlBuildInfo.cmake)
  file(READ "${source}/build/generated/train/run/build_info.h" text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(git dir)
  execute_process(COMMAND ${GIT_EXECUTABLE} -c user.name=t -c user.email=t@t ${ARGN} WORKING_DIRECTORY "${dir}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "git ${ARGN} failed in ${dir}")
  endif()
endfunction()

file(MAKE_DIRECTORY "${WORK}/repo/inner")
file(WRITE "${WORK}/repo/a.txt" "a\n")
git("${WORK}/repo" init -q)
git("${WORK}/repo" add a.txt)
git("${WORK}/repo" commit -q -m one)
execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD WORKING_DIRECTORY "${WORK}/repo"
                OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE)

build_info("${WORK}/repo" text)
if(NOT text MATCHES "#define GL_BUILD_VERSION \"9.8.7\"" OR NOT text MATCHES "#define GL_BUILD_COMMIT \"${head}\"")
  message(FATAL_ERROR "a checkout's commit ${head} is not in the header:\n${text}")
endif()

file(MAKE_DIRECTORY "${WORK}/plain")
build_info("${WORK}/plain" text)
if(NOT text MATCHES "#define GL_BUILD_COMMIT \"\"")
  message(FATAL_ERROR "a folder outside git got a commit:\n${text}")
endif()

build_info("${WORK}/repo/inner" text)
if(NOT text MATCHES "#define GL_BUILD_COMMIT \"\"")
  message(FATAL_ERROR "a folder inside another checkout took its commit:\n${text}")
endif()
file(REMOVE_RECURSE "${WORK}")
message(STATUS "build info: ${head} from the checkout, none outside")
