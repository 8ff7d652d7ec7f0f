# What data/ decodes and writes images and reads dataset TOML with: stb (header only), libwebp,
# libjpeg(-turbo), libpng (and its zlib), toml++. Included from the top CMakeLists.txt with
# GL_DATA_REQUIRED set: ON (tools or tests are built) stops at the first one missing, naming its
# Debian package; OFF reports what is missing and leaves GL_IMAGE_LIBS_FOUND off, so the runtime
# and the model layers build without them. Sets GL_IMAGE_LIBS_FOUND, GL_IMAGE_LIBRARIES and GL_IMAGE_INCLUDE_DIRS.
find_path(GL_STB_INCLUDE_DIR stb/stb_image.h)
find_path(GL_WEBP_INCLUDE_DIR webp/decode.h)
find_path(GL_JPEG_INCLUDE_DIR jpeglib.h)
find_library(GL_JPEG_LIBRARY jpeg)
find_path(GL_PNG_INCLUDE_DIR png.h)
find_library(GL_PNG_LIBRARY png16)
find_library(GL_WEBP_LIBRARY webp)
find_package(tomlplusplus 3 QUIET)
find_package(ZLIB QUIET)  # libpng's own zlib: the CRC-32 of PNG chunks read back
set(GL_IMAGE_LIBS_FOUND ON)
set(_gl_missing "")
foreach(_gl_dep "GL_STB_INCLUDE_DIR;stb_image;libstb-dev" "GL_WEBP_LIBRARY;libwebp;libwebp-dev"
                "GL_WEBP_INCLUDE_DIR;libwebp headers;libwebp-dev" "tomlplusplus_FOUND;toml++;libtomlplusplus-dev"
                "GL_JPEG_LIBRARY;libjpeg-turbo;libjpeg62-turbo-dev" "GL_JPEG_INCLUDE_DIR;jpeglib.h;libjpeg62-turbo-dev"
                "GL_PNG_LIBRARY;libpng;libpng-dev" "GL_PNG_INCLUDE_DIR;png.h;libpng-dev" "ZLIB_FOUND;zlib;zlib1g-dev")
  list(GET _gl_dep 0 _gl_var)
  list(GET _gl_dep 1 _gl_what)
  list(GET _gl_dep 2 _gl_pkg)
  if(NOT ${_gl_var})
    if(GL_DATA_REQUIRED)
      message(FATAL_ERROR "${_gl_what} not found: run `make deps` (Debian package ${_gl_pkg}), or configure "
                          "with -DGL_BUILD_TOOLS=OFF -DGL_BUILD_TESTS=OFF to build the runtime and models alone")
    endif()
    set(GL_IMAGE_LIBS_FOUND OFF)
    list(APPEND _gl_missing "${_gl_what}")
  endif()
endforeach()
if(NOT GL_IMAGE_LIBS_FOUND)
  list(REMOVE_DUPLICATES _gl_missing)
  string(REPLACE ";" ", " _gl_missing "${_gl_missing}")
  message(STATUS "ggml-lite: data/, pipelines/ and train/run/ are not built (${_gl_missing} not found)")
  return()
endif()
# libjpeg's jconfig.h (JPEG_LIB_VERSION) sits in the multiarch folder on Debian and Ubuntu
# (include/x86_64-linux-gnu): take the one of the jpeglib.h found, ahead of the system's, and check it
# against the library's soname; headers and library of two libjpeg versions ("Wrong JPEG library
# version: library is 62, caller expects 80") fail on every JPEG at run time.
file(GLOB _gl_jconfig_dirs LIST_DIRECTORIES true "${GL_JPEG_INCLUDE_DIR}/*-linux-gnu*")
find_path(GL_JPEG_CONFIG_DIR jconfig.h PATHS ${GL_JPEG_INCLUDE_DIR} ${_gl_jconfig_dirs} NO_DEFAULT_PATH)
if(NOT GL_JPEG_CONFIG_DIR)
  message(FATAL_ERROR "jconfig.h not found beside ${GL_JPEG_INCLUDE_DIR}/jpeglib.h: run `make deps` (Debian "
                      "package libjpeg62-turbo-dev)")
endif()
file(STRINGS "${GL_JPEG_CONFIG_DIR}/jconfig.h" _gl_jpeg_version REGEX "^#define JPEG_LIB_VERSION +[0-9]+")
string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _gl_jpeg_version "${_gl_jpeg_version}")
get_filename_component(_gl_jpeg_real "${GL_JPEG_LIBRARY}" REALPATH)
if(_gl_jpeg_real MATCHES "libjpeg\\.so\\.([0-9]+)")
  set(_gl_jpeg_soname "${CMAKE_MATCH_1}")
  if(_gl_jpeg_soname LESS 10)
    math(EXPR _gl_jpeg_soname "${_gl_jpeg_soname} * 10")  # libjpeg.so.8 is version 80
  endif()
  if(_gl_jpeg_version AND NOT _gl_jpeg_version EQUAL _gl_jpeg_soname)
    message(FATAL_ERROR "libjpeg: ${GL_JPEG_CONFIG_DIR}/jconfig.h is version ${_gl_jpeg_version} but "
                        "${GL_JPEG_LIBRARY} is version ${_gl_jpeg_soname}: point CMAKE_PREFIX_PATH at one libjpeg")
  endif()
endif()
set(GL_IMAGE_LIBRARIES ${GL_WEBP_LIBRARY} ${GL_JPEG_LIBRARY} ${GL_PNG_LIBRARY} ZLIB::ZLIB)
set(GL_IMAGE_INCLUDE_DIRS ${GL_JPEG_CONFIG_DIR} ${GL_STB_INCLUDE_DIR} ${GL_WEBP_INCLUDE_DIR} ${GL_JPEG_INCLUDE_DIR}
    ${GL_PNG_INCLUDE_DIR})
