// Versions and devices of the CUDA stack this build links.  With no GPU,
// cudaGetDeviceCount fails (cudaErrorInsufficientDriver or NoDevice) and
// leaves its output untouched, so the count starts at 0.
#include "dsi_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

extern "C" int dsi_cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); // clear the sticky error for later callers
        return 0;
    }
    return count;
}

extern "C" void dsi_cuda_print_info(FILE *out)
{
    int runtime = 0, driver = 0, nccl = 0;
    int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cublasGetProperty(MAJOR_VERSION, &cublas_major);
    cublasGetProperty(MINOR_VERSION, &cublas_minor);
    cublasGetProperty(PATCH_LEVEL, &cublas_patch);
    ncclGetVersion(&nccl);
    fprintf(out, "cuda-runtime %d.%d\n", runtime / 1000, (runtime % 1000) / 10);
    if (driver > 0)
        fprintf(out, "cuda-driver  %d.%d\n", driver / 1000, (driver % 1000) / 10);
    else
        fprintf(out, "cuda-driver  none\n");
    fprintf(out, "cublas       %d.%d.%d\n", cublas_major, cublas_minor, cublas_patch);
    fprintf(out, "nccl         %d.%d.%d\n", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
    int count = dsi_cuda_device_count();
    fprintf(out, "cuda-devices %d\n", count);
    for (int i = 0; i < count; i++) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
            fprintf(out, "  device %d: %s, %.1f GiB, sm_%d%d, %d SMs\n", i, prop.name,
                    (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major,
                    prop.minor, prop.multiProcessorCount);
    }
}
