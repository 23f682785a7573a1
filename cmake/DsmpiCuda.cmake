# Decides whether the CUDA backend (cudart + cuBLAS + NCCL) is built.
#   DSMPI_WITH_CUDA=AUTO  build it when the toolkit, nvcc and NCCL are found
#   DSMPI_WITH_CUDA=ON    require them
#   DSMPI_WITH_CUDA=OFF   never
# Sets DSMPI_CUDA_ENABLED.  Building needs no GPU: nothing here runs CUDA code.

set(DSMPI_CUDA_ENABLED OFF)
string(TOUPPER "${DSMPI_WITH_CUDA}" _dsmpi_cuda_mode)
if(NOT _dsmpi_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "DSMPI_WITH_CUDA=${DSMPI_WITH_CUDA} is not accepted (accepted: AUTO, ON, OFF)")
endif()

if(NOT _dsmpi_cuda_mode STREQUAL "OFF")
  set(_dsmpi_cuda_required)
  if(_dsmpi_cuda_mode STREQUAL "ON")
    set(_dsmpi_cuda_required REQUIRED)
  endif()
  find_package(CUDAToolkit ${_dsmpi_cuda_required})
  find_package(NCCL ${_dsmpi_cuda_required})
  include(CheckLanguage)
  check_language(CUDA)
  if(CUDAToolkit_FOUND AND NCCL_FOUND AND CMAKE_CUDA_COMPILER)
    # `native` fails on machines without a GPU: name the architectures.
    # 80 = A100, 90 = H100/H200.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(DSMPI_CUDA_ENABLED ON)
  elseif(_dsmpi_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "DSMPI_WITH_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER or put nvcc on PATH)")
  else()
    message(STATUS "CUDA backend not built (toolkit ${CUDAToolkit_FOUND}, NCCL ${NCCL_FOUND}, nvcc '${CMAKE_CUDA_COMPILER}')")
  endif()
endif()
