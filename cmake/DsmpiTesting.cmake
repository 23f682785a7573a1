# Test helpers.  MPI tests are launched from CMake's MPIEXEC_* variables;
# Open MPI's run-as-root and oversubscription switches are added only when
# the test machine needs them (as environment variables, which other MPI
# implementations ignore).

cmake_host_system_information(RESULT DSMPI_TEST_CORES QUERY NUMBER_OF_PHYSICAL_CORES)
if(NOT DSMPI_TEST_CORES OR DSMPI_TEST_CORES LESS 1)
  cmake_host_system_information(RESULT DSMPI_TEST_CORES QUERY NUMBER_OF_LOGICAL_CORES)
endif()
execute_process(COMMAND id -u OUTPUT_VARIABLE _dsmpi_uid OUTPUT_STRIP_TRAILING_WHITESPACE)
set(DSMPI_TEST_AS_ROOT OFF)
if(_dsmpi_uid STREQUAL "0")
  set(DSMPI_TEST_AS_ROOT ON)
endif()
set(DSMPI_TEST_MPI_ENV "" CACHE STRING
  "Extra NAME=VALUE pairs for MPI tests, e.g. OMPI_MCA_btl_vader_single_copy_mechanism=none in containers that forbid cross-memory attach")

# dsmpi_add_test(NAME SOURCES src... [LABELS l...] [ARGS a...] [INTERNAL])
# One executable, one CTest.  INTERNAL links the static library so the test
# can reach private functions.  Exit code 77 marks the test skipped.
function(dsmpi_add_test name)
  cmake_parse_arguments(T "INTERNAL" "" "SOURCES;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  if(T_INTERNAL)
    target_link_libraries(${name} PRIVATE dsmpi_internal)
  else()
    target_link_libraries(${name} PRIVATE dsmpi::dsmpi)
  endif()
  target_link_libraries(${name} PRIVATE dsmpi_test_support dsmpi_build_flags)
  add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "unit;${T_LABELS}" SKIP_RETURN_CODE 77 TIMEOUT 300
    ENVIRONMENT "${DSMPI_TEST_SANITIZER_ENV}")
endfunction()

# Under the sanitizers, leaks inside the MPI stack are suppressed by library
# name (tests/lsan.supp).  Open MPI unloads its components before the leak
# check runs, so their frames cannot be named then, and MPI tests check
# memory errors and undefined behaviour but not leaks.  A test that wants
# leaks checked under MPI too (the allocation-failure sweep) adds
# DSMPI_TEST_SANITIZER_MPI_LEAK_ENV: every allocation's stack is recorded with
# the full unwinder, whose outer frames (libmpi, PMIx) are still named and
# suppressed; it makes MPI tests 2-3 times slower.
set(DSMPI_TEST_SANITIZER_ENV "")
set(DSMPI_TEST_SANITIZER_MPI_ENV "")
set(DSMPI_TEST_SANITIZER_MPI_LEAK_ENV "")
if(DSMPI_SANITIZE)
  set(DSMPI_TEST_SANITIZER_ENV
    LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan.supp:print_suppressions=0)
  set(DSMPI_TEST_SANITIZER_MPI_ENV ${DSMPI_TEST_SANITIZER_ENV} ASAN_OPTIONS=detect_leaks=0)
  set(DSMPI_TEST_SANITIZER_MPI_LEAK_ENV ${DSMPI_TEST_SANITIZER_ENV}
    ASAN_OPTIONS=fast_unwind_on_malloc=0)
endif()

# The environment an MPI test with `nprocs` ranks needs on this machine.
function(dsmpi_mpi_test_env nprocs out_var)
  set(env ${DSMPI_TEST_MPI_ENV} ${DSMPI_TEST_SANITIZER_MPI_ENV} OPENBLAS_NUM_THREADS=1)
  if(DSMPI_TEST_AS_ROOT)
    list(APPEND env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  endif()
  if(nprocs GREATER DSMPI_TEST_CORES)
    list(APPEND env OMPI_MCA_rmaps_base_oversubscribe=1)
  endif()
  set(${out_var} "${env}" PARENT_SCOPE)
endfunction()

# dsmpi_add_mpi_test(NAME NPROCS n COMMAND cmd args... [LABELS l...] [TIMEOUT s])
# COMMAND may name an executable target.
function(dsmpi_add_mpi_test name)
  cmake_parse_arguments(T "" "NPROCS;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  list(POP_FRONT T_COMMAND program)
  if(TARGET ${program})
    set(program $<TARGET_FILE:${program}>)
  endif()
  add_test(NAME ${name}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_NPROCS} ${MPIEXEC_PREFLAGS}
            ${program} ${MPIEXEC_POSTFLAGS} ${T_COMMAND})
  dsmpi_mpi_test_env(${T_NPROCS} env)
  set_tests_properties(${name} PROPERTIES
    LABELS "mpi;${T_LABELS}" ENVIRONMENT "${env}" SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT}
    PROCESSORS ${T_NPROCS})
endfunction()
