/* Fuzz target: nccl-tests logs.  The first byte picks the import options
 * (primitive, GPUs per node, group size, the file name the primitive may come
 * from); the rest is the log.  A log that imports is then fitted (the
 * communication model of a 16 x 8 cluster) and a few collectives predicted. */
#include <dsmpi/dsmpi.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fit_and_predict(const ds_comm_samples_t *samples)
{
    ds_cluster_t cluster;
    ds_comm_model_t *model = NULL;
    if (ds_cluster_init(&cluster, 16, 8, "a100-40g") != DS_OK ||
        ds_comm_model_create(&cluster, ds_comm_samples_data(samples), ds_comm_samples_size(samples),
                             NULL, &model) != DS_OK)
        return;
    static const struct {
        ds_comm_op_t op;
        int64_t bytes;
        int group;
    } shapes[] = {
        {DS_COMM_ALLREDUCE, 1 << 20, 128}, {DS_COMM_ALLREDUCE, 8, 2},
        {DS_COMM_ALLGATHER, 1 << 30, 16},  {DS_COMM_REDUCE_SCATTER, 4096, 8},
        {DS_COMM_SENDRECV, 1 << 24, 2},    {DS_COMM_ALLTOALL, 1 << 16, 64},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        ds_event_key_t key;
        ds_comm_prediction_t prediction;
        if (ds_comm_key_init(&key, shapes[i].op, shapes[i].bytes, shapes[i].group, 8) == DS_OK)
            (void)ds_comm_model_predict(model, &key, &prediction);
    }
    ds_comm_model_destroy(model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const origins[] = {"all_reduce_16.log", "logs/sendrecv_8.log",
                                          "job-1234.out", "alltoall_perf.txt"};
    static const int per_node[] = {0, 0, 1, 4, 8, 1024};
    if (size < 1 || size > (1 << 20))
        return 0;
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    uint8_t pick = data[0];
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    if (pick & 0x80)
        options.op = (pick >> 4) & 0x7; /* every primitive, ps_push/ps_pull included */
    options.gpus_per_node = per_node[(pick >> 2) % 6];
    options.group_size = (pick & 0x40) ? 1 + (pick & 0x0f) : 0;
    if (pick & 0x20)
        options.source = "fuzz-cluster";
    ds_comm_samples_t *samples = NULL;
    ds_comm_import_info_t info;
    if (ds_comm_samples_create(&samples) == DS_OK &&
        ds_comm_parse_nccl_tests(text, origins[pick & 0x3], &options, samples, &info) == DS_OK)
        fit_and_predict(samples);
    ds_comm_samples_destroy(samples);
    free(text);
    return 0;
}
