# The test executables and their CTest registration (included from the top CMakeLists.txt).
#   gl-tests      tests/*.cpp, the CPU suite; one CTest test per doctest test case (label cpu)
#   gl-gpu-tests  tests/gpu/*.cpp, *.cu; built with CUDA only; one CTest test (label gpu)
#   embed         installs the library and builds tests/embed/ against it (label embed)
#   cli: ...      the tools' command lines: refusals, exit statuses, help (label cli)
#   gl-san-tests  with GL_SANITIZE=ON: a test subset under ASan + UBSan (label sanitize, GlSanitize.cmake)
# The op case table (op_harness.cpp, cases_*.cpp) is shared by the CPU and GPU suites.

# doctest: the Debian package's config, else a bare header (for a machine without the package,
# pass -DGL_DOCTEST_INCLUDE_DIR=<folder holding doctest/doctest.h>).
find_package(doctest QUIET CONFIG)
if(NOT TARGET doctest::doctest)
  find_path(GL_DOCTEST_INCLUDE_DIR doctest/doctest.h)
  if(NOT GL_DOCTEST_INCLUDE_DIR)
    message(FATAL_ERROR "doctest not found: run `make deps` (Debian package doctest-dev), pass "
                        "-DGL_DOCTEST_INCLUDE_DIR=<folder holding doctest/doctest.h>, or -DGL_BUILD_TESTS=OFF")
  endif()
  add_library(doctest::doctest INTERFACE IMPORTED)
  set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${GL_DOCTEST_INCLUDE_DIR}")
endif()
if(doctest_DIR AND EXISTS "${doctest_DIR}/doctest.cmake")
  include("${doctest_DIR}/doctest.cmake")
endif()

set(GL_TEST_DIR ${PROJECT_SOURCE_DIR}/tests)
file(GLOB GL_TEST_CASE_SOURCES CONFIGURE_DEPENDS ${GL_TEST_DIR}/op_harness.cpp ${GL_TEST_DIR}/cases_*.cpp)
file(GLOB GL_TEST_SOURCES CONFIGURE_DEPENDS ${GL_TEST_DIR}/*.cpp)
list(REMOVE_ITEM GL_TEST_SOURCES ${GL_TEST_CASE_SOURCES})

# Case files register themselves from static initialisers, so they must be linked as objects,
# never through a static archive that would drop them.
add_library(gl-test-cases OBJECT ${GL_TEST_CASE_SOURCES})
target_include_directories(gl-test-cases PUBLIC ${GL_TEST_DIR})
target_link_libraries(gl-test-cases PUBLIC ggml-lite)

add_executable(gl-tests ${GL_TEST_SOURCES} $<TARGET_OBJECTS:gl-test-cases>)
target_link_libraries(gl-tests PRIVATE gl-test-cases gl-demo-assets sdtrain-options gl-run gl-cli
                               nlohmann_json::nlohmann_json doctest::doctest)
target_compile_definitions(gl-tests PRIVATE GL_VERSION_FOR_TESTS="${PROJECT_VERSION}")
# test_cuda_sources.cpp reads the CUDA sources (a rule the GPU-less CI checks).
target_compile_definitions(gl-tests PRIVATE GL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# test_png.cpp reads the written PNGs back with libpng itself.
target_include_directories(gl-tests PRIVATE ${GL_PNG_INCLUDE_DIR})
target_link_libraries(gl-tests PRIVATE ${GL_PNG_LIBRARY})
# The command-line tests of gl-txt2img and sdtrain run the built tools (skipped when tools are not built).
if(TARGET gl-txt2img)
  target_compile_definitions(gl-tests PRIVATE GL_TXT2IMG_BIN="$<TARGET_FILE:gl-txt2img>")
  add_dependencies(gl-tests gl-txt2img)
endif()
if(TARGET gl-sdtrain)
  target_compile_definitions(gl-tests PRIVATE GL_SDTRAIN_BIN="$<TARGET_FILE:gl-sdtrain>")
  add_dependencies(gl-tests gl-sdtrain)
endif()
if(COMMAND doctest_discover_tests)
  # Discovery splits a test case name at ';' and its halves match no test case, and a run that
  # matches none passes: any entry that runs no test case fails instead (keep ';' out of names).
  doctest_discover_tests(gl-tests PROPERTIES LABELS cpu FAIL_REGULAR_EXPRESSION "test cases: +0 [|]")
else()
  add_test(NAME gl-tests COMMAND gl-tests)
  set_tests_properties(gl-tests PROPERTIES LABELS cpu)
endif()

# GPU suite. Its executable prints "GPU tests skipped: <reason>" and exits 0 when no usable GPU
# is present; CTest then reports the test as skipped rather than passed.
file(GLOB GL_GPU_TEST_SOURCES CONFIGURE_DEPENDS ${GL_TEST_DIR}/gpu/*.cpp ${GL_TEST_DIR}/gpu/*.cu)
if(GL_GPU_TEST_SOURCES AND GL_HAVE_CUDA)
  add_executable(gl-gpu-tests ${GL_GPU_TEST_SOURCES} $<TARGET_OBJECTS:gl-test-cases>)
  target_link_libraries(gl-gpu-tests PRIVATE gl-test-cases gl-pipelines gl-train ggml-lite nlohmann_json::nlohmann_json
                                             doctest::doctest CUDA::cudart)
  add_test(NAME gpu COMMAND gl-gpu-tests)
  set_tests_properties(gpu PROPERTIES LABELS gpu SKIP_REGULAR_EXPRESSION "GPU tests skipped:")
elseif(GL_GPU_TEST_SOURCES)
  add_test(NAME gpu COMMAND ${CMAKE_COMMAND} -E echo
           "GPU tests skipped: ggml-lite was configured without CUDA (GL_CUDA=${GL_CUDA})")
  set_tests_properties(gpu PROPERTIES LABELS gpu SKIP_REGULAR_EXPRESSION "GPU tests skipped:")
endif()

# The sanitizer pass's executable (cmake/GlSanitize.cmake), in a GL_SANITIZE=ON build folder only.
gl_add_sanitize_tests()

# Out-of-tree embedding: install to a scratch prefix, then find_package(ggml-lite) from tests/embed/.
add_test(NAME embed
         COMMAND ${CMAKE_COMMAND}
                 -DGL_BUILD_DIR=${PROJECT_BINARY_DIR}
                 -DGL_EMBED_SOURCE=${GL_TEST_DIR}/embed
                 -DGL_WORK_DIR=${PROJECT_BINARY_DIR}/embed-test
                 -DGL_GENERATOR=${CMAKE_GENERATOR}
                 -DGL_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                 -DGL_BUILD_TYPE=${CMAKE_BUILD_TYPE}
                 -P ${GL_TEST_DIR}/embed/run.cmake)
set_tests_properties(embed PROPERTIES LABELS embed TIMEOUT 600)

# cmake/GlBuildInfo.cmake's commit capture on scratch folders (a checkout, a plain folder, a folder
# inside another checkout).
if(GIT_FOUND)
  add_test(NAME "cli: build info names the checkout's commit"
           COMMAND ${CMAKE_COMMAND} -DGL_MODULE_DIR=${PROJECT_SOURCE_DIR}/cmake
                   -DWORK=${PROJECT_BINARY_DIR}/build-info-test -P ${GL_TEST_DIR}/cli/build_info.cmake)
  set_tests_properties("cli: build info names the checkout's commit" PROPERTIES LABELS cli)
endif()

# The tools' command lines (tools/common/cli.h, unit-tested in tests/test_cli.cpp): each program
# refuses a bad value naming the flag, with exit status 2; a failure exits 1 (gl-sd15check: 2).
function(gl_cli_test name status expect program)  # then the program's arguments
  if(TARGET ${program})
    add_test(NAME "cli: ${name}" COMMAND ${CMAKE_COMMAND} -DSTATUS=${status} "-DEXPECT=${expect}"
             -P ${GL_TEST_DIR}/cli/expect.cmake -- $<TARGET_FILE:${program}> ${ARGN})
    set_tests_properties("cli: ${name}" PROPERTIES LABELS cli)
  endif()
endfunction()
gl_cli_test("example-denoiser --steps overflow" 2 "example-denoiser: error: --steps wants an integer in \\[1, " example-denoiser --steps 4294967297)
gl_cli_test("example-denoiser --depth overflow" 2 "--depth wants an integer in \\[1, 256\\]" example-denoiser --depth 4294967296)
gl_cli_test("example-denoiser --lr garbage" 2 "--lr wants a finite number >= 0, got 'abc'" example-denoiser --lr abc)
gl_cli_test("example-denoiser --backend gpu" 2 "--backend: unknown backend 'gpu'" example-denoiser --backend gpu)
gl_cli_test("example-denoiser --channels 12" 2 "--channels must be a multiple of 8" example-denoiser --channels 12)
gl_cli_test("example-denoiser --help" 0 "--recompute none\\|blocks\\|cheap" example-denoiser --help)
gl_cli_test("gl-make-demo writes the assets" 0 "dataset: .*10_shapes \\(24 images" gl-make-demo ${PROJECT_BINARY_DIR}/make-demo-test)
gl_cli_test("gl-make-demo --v2 writes an SD2.x model" 0 "model: .*\\(SD2.x diffusers folder" gl-make-demo ${PROJECT_BINARY_DIR}/make-demo-v2-test --v2 --variants 1)
gl_cli_test("gl-make-demo --side 10" 2 "--side wants an integer in \\[32, 4096\\]" gl-make-demo OUT --side 10)
gl_cli_test("example-denoiser trains" 0 "step +30/30  loss " example-denoiser --steps 30 --log-every 10 --backend cpu)
gl_cli_test("gl-merge unknown flag first" 2 "not expected: --frobnicate" gl-merge --frobnicate B L O)
gl_cli_test("gl-merge missing OUT" 2 "OUT is required" gl-merge B L)
gl_cli_test("gl-merge --multiplier garbage" 2 "--multiplier wants a finite number, got 'x'" gl-merge B L O --multiplier x)
gl_cli_test("gl-merge missing base" 1 "gl-merge: error: .*no-such-base" gl-merge no-such-base L O)
gl_cli_test("gl-sd15check --runs 0" 2 "--runs wants an integer in \\[1, 100\\]" gl-sd15check --runs 0 M R)
gl_cli_test("gl-sd15check missing reference" 2 "gl-sd15check: error: .*no-such-reference" gl-sd15check M no-such-reference --backend cpu)
gl_cli_test("sdtrain --help" 0 "Network \\(LoRA / LoCon\\)" gl-sdtrain --help)
gl_cli_test("sdtrain unknown option" 2 "sdtrain: error: .*--frobnicate" gl-sdtrain --frobnicate)
gl_cli_test("sdtrain no model" 2 "--pretrained_model_name_or_path is required" gl-sdtrain --output_dir o)
gl_cli_test("sdtrain full_bf16 without bf16" 2 "--full_bf16 needs --mixed_precision bf16" gl-sdtrain
            --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --full_bf16)
gl_cli_test("sdtrain refused kohya option" 2 "--deepspeed: kohya's option is not supported" gl-sdtrain --deepspeed)
gl_cli_test("sdtrain missing model file" 1 "sdtrain: error: .*no-such-model" gl-sdtrain
            --pretrained_model_name_or_path no-such-model --train_data_dir d --resolution 512
            --output_dir ${PROJECT_BINARY_DIR}/sdtrain-cli-out --network_module networks.lora)
gl_cli_test("sdtrain --in_json with --reg_data_dir" 2
            "--reg_data_dir with --in_json: kohya's fine-tuning dataset has no regularisation images" gl-sdtrain
            --pretrained_model_name_or_path m --in_json meta.json --reg_data_dir r --resolution 512 --output_dir o
            --network_module networks.lora)
gl_cli_test("sdtrain --color_aug with --cache_latents" 2 "--cache_latents cannot be used with --color_aug" gl-sdtrain
            --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --color_aug --cache_latents)
gl_cli_test("sdtrain --token_warmup_min -1" 2 "--token_warmup_min wants an integer in \\[0, 65536\\]"
            gl-sdtrain --token_warmup_min -1)
gl_cli_test("sdtrain missing config file" 2 "--config_file nope.toml: cannot be read" gl-sdtrain --config_file nope)
gl_cli_test("sdtrain unwritable output folder" 1 "sdtrain: error: --output_dir /proc/sdtrain-out: cannot be created"
            gl-sdtrain --pretrained_model_name_or_path m --train_data_dir d --resolution 512
            --output_dir /proc/sdtrain-out --network_module networks.lora)
# Numbers and values that pass a first check and break later are refused by the option's name.
# Several GPUs: refused before any rank starts (the CPU suite's host has no GPU; a GPU host names the missing one).
gl_cli_test("sdtrain --gpus 7" 2 "--gpus 7: (this host has no CUDA device|GPU 7 does not exist)" gl-sdtrain
            --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --gpus 7)
gl_cli_test("sdtrain --num_processes 0" 2 "--num_processes wants an integer in \\[1, 1024\\]" gl-sdtrain
            --num_processes 0)
gl_cli_test("sdtrain --dist_backend mpi" 2 "--dist_backend 'mpi': nccl or tcp" gl-sdtrain
            --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --num_processes 2 --dist_backend mpi)
gl_cli_test("sdtrain --dist_backend nccl --backend cpu" 2 "--dist_backend nccl with --backend cpu" gl-sdtrain
            --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --num_processes 2 --dist_backend nccl --backend cpu)
gl_cli_test("sdtrain --text_encoder_lr -inf" 2 "--text_encoder_lr wants a finite number >= 0, got '-inf'"
            gl-sdtrain --text_encoder_lr -inf)
gl_cli_test("sdtrain --learning_rate 1e39" 2 "--learning_rate wants a finite number >= 0 that a 32-bit float holds"
            gl-sdtrain --learning_rate 1e39)
gl_cli_test("sdtrain --huber_c 1e39" 2 "--huber_c wants a finite number in \\[0, 1\\], got '1e39'"
            gl-sdtrain --huber_c 1e39)
gl_cli_test("sdtrain --seed 2^64" 2 "--seed wants an integer in \\[0, 18446744073709551615\\]"
            gl-sdtrain --seed 18446744073709551616)
gl_cli_test("sdtrain --scale_weight_norms with lycoris.kohya" 2
            "--scale_weight_norms with lycoris.kohya is not supported" gl-sdtrain --pretrained_model_name_or_path m
            --train_data_dir d --resolution 512 --output_dir o --network_module lycoris.kohya --scale_weight_norms 1)
gl_cli_test("sdtrain unknown lr weight preset" 2 "--network_args up_lr_weight=sin: unknown lr_weight preset 'sin'"
            gl-sdtrain --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --network_args up_lr_weight=sin)
gl_cli_test("sdtrain --cache_latents=yes" 2 "--cache_latents is a switch and takes no value" gl-sdtrain --cache_latents=yes)
gl_cli_test("sdtrain --output_name .." 2 "--output_name must be a file name \\(not empty, '.' or '..'"
            gl-sdtrain --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
            --network_module networks.lora --output_name ..)
# The validation options: kohya's argparse takes any int (0 ends in a ZeroDivisionError there).
foreach(_gl_val "validation_split;1.5;a finite number in \\[0, 1\\]" "validate_every_n_steps;0;an integer in \\[1, "
                "validate_every_n_epochs;0;an integer in \\[1, " "max_validation_steps;0;an integer in \\[1, "
                "validation_seed;-1;an integer in \\[0, ")
  list(GET _gl_val 0 _gl_opt)
  list(GET _gl_val 1 _gl_bad)
  list(GET _gl_val 2 _gl_want)
  gl_cli_test("sdtrain --${_gl_opt} ${_gl_bad}" 2 "--${_gl_opt} wants ${_gl_want}" gl-sdtrain
              --pretrained_model_name_or_path m --train_data_dir d --resolution 512 --output_dir o
              --network_module networks.lora --${_gl_opt} ${_gl_bad})
endforeach()
gl_cli_test("gl-txt2img -W 8192" 2 "--width wants an integer in \\[8, 2048\\], got '8192'"
            gl-txt2img M -p x -W 8192 -H 8192 --steps 1)
gl_cli_test("gl-txt2img --seed -2" 2 "--seed wants an integer in \\[0, 18446744073709551615\\], got '-2'"
            gl-txt2img M -p x --seed -2)
