# The sanitizer pass: the library (CPU only) and the tests of untrusted input, built with
# AddressSanitizer and UndefinedBehaviorSanitizer in a build folder of their own, so that signed
# overflow, out-of-bounds access and leaks fail the run instead of passing by luck:
#   make sanitize          (what .ci/run does after make test), or by hand:
#   cmake -S . -B build-san -G Ninja -DGL_SANITIZE=ON && ninja -C build-san gl-san-tests
#   ASAN_OPTIONS=allocator_may_return_null=1 build-san/gl-san-tests
#
# GL_SANITIZE_TESTS decides what runs: globs of tests/ files (a pattern nothing matches is skipped,
# so a suite added later joins when it lands). GL_SANITIZE_FILTER is a doctest test-case filter
# over them ("*" runs all). The test executable links what gl-tests links, its op-case objects
# aside.
option(GL_SANITIZE "Build everything with -fsanitize=address,undefined (CPU only) and the gl-san-tests target" OFF)
set(GL_SANITIZE_TESTS
    "test_safetensors.cpp;test_torch_ckpt.cpp;test_files.cpp;test_sizes.cpp;test_merge_safety.cpp;test_kohya_metadata.cpp;test_data_fuzz.cpp;test_data_image.cpp;test_data_dataset.cpp;test_cli.cpp;test_cli_*.cpp;test_sdtrain_options.cpp;test_sdtrain_state.cpp;test_data_npz.cpp;test_weighted_captions.cpp;test_data_face_crop.cpp;test_data_fine_tuning.cpp"
    CACHE STRING "tests/ files (globs) the sanitizer pass builds and runs")
set(GL_SANITIZE_FILTER "*" CACHE STRING "doctest -tc filter for the sanitizer pass")

if(GL_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR "GL_SANITIZE=ON needs g++ or clang++")
  endif()
  # Compiled into every target of this build folder: the library's own code is what is checked.
  # -O0 halves the compile time against -O1 (the tests run in seconds either way); every report
  # is fatal.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -O0 -g)
  add_link_options(-fsanitize=address,undefined)
endif()

# Called from GlTests.cmake once gl-tests exists.
function(gl_add_sanitize_tests)
  if(NOT GL_SANITIZE)
    return()
  endif()
  set(sources ${GL_TEST_DIR}/test_main.cpp ${GL_TEST_DIR}/op_harness.cpp)
  foreach(pattern ${GL_SANITIZE_TESTS})
    file(GLOB found CONFIGURE_DEPENDS ${GL_TEST_DIR}/${pattern})
    list(APPEND sources ${found})
  endforeach()
  list(REMOVE_DUPLICATES sources)
  get_target_property(libs gl-tests LINK_LIBRARIES)
  list(REMOVE_ITEM libs gl-test-cases)
  add_executable(gl-san-tests EXCLUDE_FROM_ALL ${sources})
  target_include_directories(gl-san-tests PRIVATE ${GL_TEST_DIR})
  target_link_libraries(gl-san-tests PRIVATE ${libs})
  # allocator_may_return_null: malloc returns null for absurd sizes, as without ASan (operator
  # new still aborts under ASan: tests that need std::bad_alloc skip themselves there).
  add_test(NAME sanitize COMMAND gl-san-tests -tc=${GL_SANITIZE_FILTER})
  set_tests_properties(sanitize PROPERTIES LABELS sanitize
    ENVIRONMENT "ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endfunction()
