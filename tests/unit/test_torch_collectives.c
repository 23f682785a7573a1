/* framework: collectives read from torch.profiler traces with their sizes
 * (record_param_comms args), grouped and timed: on a GPU trace by the
 * device time of the NCCL kernels they launch, on a CPU trace until the
 * library's own thread ends them (gloo). */
#include "check.h"

#include <stdio.h>
#include <string.h>

/* A record_param_comms event; `launch` > 0 adds a cudaLaunchKernel inside
 * it and the kernel it launched, lasting kernel_us. */
static int comm_event(char *out, size_t size, const char *name, const char *type, long in,
                      long out_n, int ranks, double ts, double dur, int launch, double kernel_us)
{
    int n = snprintf(out, size,
                     ",{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"record_param_comms\",\"pid\":1,"
                     "\"tid\":1,\"ts\":%.1f,\"dur\":%.1f,\"args\":{\"Collective name\":\"%s\","
                     "\"dtype\":\"%s\",\"In msg nelems\":%ld,\"Out msg nelems\":%ld,"
                     "\"Group size\":%d,\"Process Group Name\":\"0\"}}",
                     ts, dur, name, type, in, out_n, ranks);
    if (launch > 0)
        n += snprintf(out + n, size - (size_t)n,
                      ",{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\","
                      "\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":2.0,\"args\":{\"correlation\":%d}}"
                      ",{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclDevKernel_Generic\","
                      "\"pid\":0,\"tid\":7,\"ts\":%.1f,\"dur\":%.1f,\"args\":{\"correlation\":%d}}",
                      ts + 1.0, launch, ts + 5.0, kernel_us, launch);
    return n;
}

static int step(char *out, size_t size, int index, double ts, double dur)
{
    return snprintf(out, size,
                    ",{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#%d\","
                    "\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":%.1f}",
                    index, ts, dur);
}

/* The collectives of the trace `text`, `expected` of them (NULL when none or unreadable). */
static ds_torch_collective_t *collectives_of(const char *text, size_t expected)
{
    ds_torch_trace_t *t = NULL;
    ds_torch_collective_t *list = NULL;
    size_t count = 0;
    CHECK_OK(ds_torch_trace_parse(text, strlen(text), "inline", &t));
    if (t != NULL)
        CHECK_OK(ds_torch_trace_collectives(t, &list, &count));
    ds_torch_trace_destroy(t);
    CHECK_MSG(count == expected, "%zu collectives, expected %zu", count, expected);
    CHECK((list == NULL) == (count == 0));
    if (count != expected) {
        ds_torch_collectives_free(list);
        return NULL;
    }
    return list;
}

/* GPU: two iterations of an all-reduce (bf16, 1 Mi elements, 8 ranks), an
 * all-gather into 1 Mi fp32 elements and a send; a barrier, a collective of
 * an unknown element type and one outside the iterations are left out. */
static void test_gpu(void)
{
    static char text[16384];
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "{\"traceEvents\":[{\"ph\":\"M\",\"name\":"
                                "\"process_name\",\"pid\":1,\"tid\":0}");
    int corr = 1;
    n += (size_t)comm_event(text + n, sizeof(text) - n, "allreduce", "BFloat16", 1048576, 1048576,
                            8, 10.0, 30.0, corr++, 999.0); /* before the first iteration */
    for (int it = 0; it < 2; it++) {
        double t0 = 1000.0 + 5000.0 * it;
        n += (size_t)step(text + n, sizeof(text) - n, it, t0, 4000.0);
        n += (size_t)comm_event(text + n, sizeof(text) - n, "allreduce", "BFloat16", 1048576,
                                1048576, 8, t0 + 100.0, 30.0, corr++, it ? 420.0 : 400.0);
        n += (size_t)comm_event(text + n, sizeof(text) - n, "_allgather_base", "Float", 131072,
                                1048576, 8, t0 + 600.0, 30.0, corr++, 300.0);
        n += (size_t)comm_event(text + n, sizeof(text) - n, "send", "BFloat16", 65536, 0, 2,
                                t0 + 1100.0, 30.0, corr++, 50.0 + 10.0 * it);
        n += (size_t)comm_event(text + n, sizeof(text) - n, "barrier", "Float", 1, 1, 8,
                                t0 + 1500.0, 30.0, corr++, 5.0);
        n += (size_t)comm_event(text + n, sizeof(text) - n, "allreduce", "ComplexFloat", 16, 16, 8,
                                t0 + 1600.0, 30.0, corr++, 5.0);
    }
    snprintf(text + n, sizeof(text) - n, "]}");
    ds_torch_collective_t *list = collectives_of(text, 3);
    if (list != NULL) {
        /* Sorted by primitive: send/recv, all-reduce, all-gather. */
        CHECK(list[0].op == DS_COMM_SENDRECV && list[0].bytes == 131072 && list[0].ranks == 2 &&
              list[0].dtype == DS_DTYPE_BF16 && list[0].count == 2);
        CHECK_NEAR(list[0].median_s, 55e-6, 1e-9);
        CHECK(list[1].op == DS_COMM_ALLREDUCE && list[1].bytes == 2097152 && list[1].ranks == 8 &&
              list[1].count == 2);
        CHECK_NEAR(list[1].median_s, 410e-6, 1e-9);
        CHECK_NEAR(list[1].min_s, 400e-6, 1e-9);
        CHECK_NEAR(list[1].max_s, 420e-6, 1e-9);
        CHECK(list[2].op == DS_COMM_ALLGATHER && list[2].bytes == 4194304 &&
              list[2].dtype == DS_DTYPE_FP32 && list[2].count == 2);
        CHECK_NEAR(list[2].median_s, 300e-6, 1e-9);
    }
    ds_torch_collectives_free(list);
}

/* CPU (gloo): the caller's record_param_comms span is short, gloo's own
 * thread runs the all-reduce longer; a trace without sizes lists nothing. */
static void test_cpu(void)
{
    static char text[8192];
    size_t n = (size_t)snprintf(text, sizeof(text), "[");
    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "{\"ph\":\"X\",\"name\":\"ProfilerStep#0\",\"pid\":1,\"tid\":1,"
                          "\"ts\":0.0,\"dur\":10000.0}");
    n += (size_t)comm_event(text + n, sizeof(text) - n, "allreduce", "Float", 1000, 1000, 2, 100.0,
                            20.0, 0, 0.0);
    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          ",{\"ph\":\"X\",\"name\":\"gloo:all_reduce\",\"pid\":1,\"tid\":2,"
                          "\"ts\":110.0,\"dur\":700.0}]");
    ds_torch_collective_t *list = collectives_of(text, 1);
    if (list != NULL) {
        CHECK(list[0].op == DS_COMM_ALLREDUCE && list[0].bytes == 4000 && list[0].ranks == 2);
        CHECK_NEAR(list[0].median_s, 710e-6, 1e-9); /* 100 us to gloo's end at 810 us */
    }
    ds_torch_collectives_free(list);

    const char *plain = "[{\"ph\":\"X\",\"name\":\"ProfilerStep#0\",\"pid\":1,\"tid\":1,\"ts\":0,"
                        "\"dur\":100},{\"ph\":\"X\",\"name\":\"gloo:all_reduce\",\"pid\":1,"
                        "\"tid\":1,\"ts\":10,\"dur\":50}]";
    CHECK(collectives_of(plain, 0) == NULL);
}

/* A cpu_op `name` at ts for dur us launching one kernel of kernel_us at device time dev_ts. */
static int op_event(char *out, size_t size, const char *name, double ts, double dur, int launch,
                    double dev_ts, double kernel_us)
{
    return snprintf(out, size,
                    ",{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"%s\",\"pid\":1,\"tid\":1,"
                    "\"ts\":%.1f,\"dur\":%.1f}"
                    ",{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\","
                    "\"pid\":1,\"tid\":1,\"ts\":%.1f,\"dur\":2.0,\"args\":{\"correlation\":%d}}"
                    ",{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,"
                    "\"ts\":%.1f,\"dur\":%.1f,\"args\":{\"correlation\":%d}}",
                    name, ts, dur, ts + 1.0, launch, dev_ts, kernel_us, launch);
}

/* A GPU layer pass: a layer norm's kernel (device 100-110 us), a tensor-parallel
 * all-reduce's NCCL kernel (115-165 us) and a GELU's kernel (230-235 us): the pass's
 * device time runs from its first kernel to its last, less the collective's device
 * time inside it. */
static void test_gpu_pass(void)
{
    static char text[8192];
    size_t n = (size_t)snprintf(text, sizeof(text),
                                "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"user_annotation\","
                                "\"name\":\"ProfilerStep#0\",\"pid\":1,\"tid\":1,\"ts\":0.0,"
                                "\"dur\":1000.0}"
                                ",{\"ph\":\"X\",\"cat\":\"user_annotation\","
                                "\"name\":\"layer:0:fwd\",\"pid\":1,\"tid\":1,\"ts\":10.0,"
                                "\"dur\":500.0}");
    n += (size_t)op_event(text + n, sizeof(text) - n, "aten::layer_norm", 20.0, 10.0, 1, 100.0,
                          10.0);
    /* the all-reduce's kernel: 115 to 165 us on the device */
    n += (size_t)comm_event(text + n, sizeof(text) - n, "allreduce", "Float", 1000, 1000, 2, 110.0,
                            20.0, 2, 50.0);
    n += (size_t)op_event(text + n, sizeof(text) - n, "aten::gelu", 200.0, 10.0, 3, 230.0, 5.0);
    n += (size_t)snprintf(text + n, sizeof(text) - n, "]}");
    ds_torch_trace_t *t = NULL;
    CHECK_OK(ds_torch_trace_parse(text, n, "inline", &t));
    size_t count = 0;
    double mean = 0.0;
    ds_torch_trace_part_time(t, DS_FRAMEWORK_LAYER_FORWARD, &count, &mean);
    CHECK_INT(count, 1);
    CHECK_NEAR(mean, (235.0 - 100.0 - 50.0) * 1e-6, 1e-12); /* 100 to 235, the 50 us of NCCL out */
    ds_torch_trace_destroy(t);
}

int main(void)
{
    test_gpu();
    test_cpu();
    test_gpu_pass();
    return check_summary("test_torch_collectives");
}
