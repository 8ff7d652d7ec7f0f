# Decides whether the CUDA backend is built (GL_HAVE_CUDA) and, when it is, enables the
# CUDA language for GL_CUDA_ARCHS and finds the toolkit (CUDA::cudart, CUDA::cublas).
# The CPU build needs nothing from CUDA: with GL_CUDA=OFF, or AUTO and no nvcc, none of this runs.

set(GL_HAVE_CUDA OFF)
# nvcc would otherwise pick whatever host compiler is first on PATH.
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "Host compiler of nvcc")
endif()

if(GL_CUDA STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(GL_HAVE_CUDA ON)
  else()
    message(STATUS "ggml-lite: no CUDA compiler found; building the CPU backend only "
                   "(put nvcc on PATH or pass -DGL_CUDA=ON to require CUDA)")
  endif()
elseif(GL_CUDA)
  set(GL_HAVE_CUDA ON)
endif()

if(GL_HAVE_CUDA)
  # Plain numbers give SASS plus PTX of that arch; "90a" gives sm_90a code, which only
  # Hopper runs, and is what enables wgmma and TMA.
  set(CMAKE_CUDA_ARCHITECTURES "${GL_CUDA_ARCHS}")
  # The library links CUDA::cudart (shared) itself; one runtime in the process, not two.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  # C++20 in .cu files as in .cpp files. CMake before 3.26 does not know nvcc's C++20 flag
  # (nvcc has had it since CUDA 12.0), so it is taught here.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
  if(CUDAToolkit_VERSION VERSION_LESS 12.0)
    message(FATAL_ERROR "ggml-lite needs CUDA 12 or newer (found ${CUDAToolkit_VERSION} at "
                        "${CUDAToolkit_BIN_DIR}); pass -DGL_CUDA=OFF for a CPU-only build")
  endif()
endif()
