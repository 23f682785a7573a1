/* Target clusters, device specs and Slurm's task lists. */
#include "check.h"

static void test_targets(void)
{
    ds_cluster_t c;
    CHECK_OK(ds_cluster_from_gpus(&c, 1024, 0));
    CHECK(c.nodes == 128 && c.gpus_per_node == 8 && ds_cluster_num_gpus(&c) == 1024);
    CHECK(c.num_levels == 2 && c.levels[0].span == 8 && c.levels[1].bandwidth_GBps > 0);
    CHECK_OK(ds_cluster_from_gpus(&c, 4, 0)); /* part of one node */
    CHECK(c.nodes == 1 && c.gpus_per_node == 4);
    CHECK_OK(ds_cluster_parse_target("nodes=16,gpus-per-node=4,device=a100-80g", &c));
    CHECK(c.nodes == 16 && c.gpus_per_node == 4 && strcmp(c.device.name, "a100-80g") == 0);
    CHECK(c.device.peak_tflops_bf16 == 312.0 && c.device.memory_GiB == 80.0);
    CHECK_FAILS(ds_cluster_from_gpus(&c, 12, 8), DS_ERR_INVALID_ARG,
                "target-gpus 12 is not a multiple of 8 devices per node");
    CHECK_FAILS(ds_cluster_from_gpus(&c, 1000000000000LL, 8), DS_ERR_INVALID_ARG,
                "target-gpus 1000000000000 is out of range (accepted: 1 to 1048576)");
    CHECK_FAILS(ds_cluster_parse_target("nodes=0", &c), DS_ERR_INVALID_ARG, "nodes 0 is out of range");
    CHECK_FAILS(ds_cluster_parse_target("nodes=4,gpus-per-node=2000", &c), DS_ERR_INVALID_ARG,
                "gpus-per-node 2000 is out of range (accepted: 1 to 1024)");
    CHECK_FAILS(ds_cluster_parse_target("nodes=4,device=tpu-v5", &c), DS_ERR_INVALID_ARG,
                "device 'tpu-v5' is not known (accepted: a100-40g, a100-80g, h100-sxm, h200, b200, cpu)");
    CHECK_FAILS(ds_cluster_parse_target("racks=4", &c), DS_ERR_INVALID_ARG, "target key 'racks' is not known");
    CHECK_FAILS(ds_cluster_parse_target("gpus-per-node=8", &c), DS_ERR_INVALID_ARG, "names no nodes");
}

static void test_cluster_file(void)
{
    const char *json =
        "{\"name\": \"fat-tree\", \"nodes\": 64, \"gpus_per_node\": 8, \"device\": \"h100-sxm\",\n"
        " \"device_memory_GiB\": 80, \"peak_tflops\": 900,\n"
        " \"levels\": [{\"name\": \"nvlink\", \"latency_us\": 1.5, \"bandwidth_GBps\": 400},\n"
        "            {\"name\": \"leaf\", \"latency_us\": 4, \"bandwidth_GBps\": 50, \"span\": 16, \"nics_per_node\": 8},\n"
        "            {\"name\": \"spine\", \"latency_us\": 6, \"bandwidth_GBps\": 50, \"oversubscription\": 2}]}";
    ds_cluster_t c;
    CHECK_OK(ds_cluster_load_json(json, strlen(json), "fat-tree.json", &c));
    CHECK(strcmp(c.name, "fat-tree") == 0 && c.nodes == 64 && c.num_levels == 3);
    CHECK(c.device.peak_tflops_bf16 == 900.0);
    CHECK(c.levels[0].latency_us == 1.5 && c.levels[0].span == 8);
    CHECK(c.levels[1].span == 16 && c.levels[1].nics_per_node == 8);
    CHECK(c.levels[2].oversubscription == 2.0 && strcmp(c.levels[2].name, "spine") == 0);
    const char *bad = "{\"nodes\": 4, \"gpus_per_node\": 8, \"levels\": [{\"latency_us\": -1, \"bandwidth_GBps\": 5}]}";
    CHECK_FAILS(ds_cluster_load_json(bad, strlen(bad), "bad.json", &c), DS_ERR_BAD_FILE,
                "bad.json: \"latency_us\" = -1 is out of range");
    const char *missing = "{\"gpus_per_node\": 8}";
    CHECK_FAILS(ds_cluster_load_json(missing, strlen(missing), "m.json", &c), DS_ERR_BAD_FILE,
                "m.json: required field \"nodes\" is missing");
}

static void test_slurm_tasks(void)
{
    int counts[8], n = 0;
    CHECK_OK(ds_slurm_parse_tasks_per_node("4(x2),3", counts, 8, &n));
    CHECK(n == 3 && counts[0] == 4 && counts[1] == 4 && counts[2] == 3);
    CHECK_OK(ds_slurm_parse_tasks_per_node("2", counts, 8, &n));
    CHECK(n == 1 && counts[0] == 2);
    CHECK_FAILS(ds_slurm_parse_tasks_per_node("4(x", counts, 8, &n), DS_ERR_INVALID_ARG,
                "SLURM_TASKS_PER_NODE '4(x' is malformed");
    CHECK_FAILS(ds_slurm_parse_tasks_per_node("1(x9)", counts, 8, &n), DS_ERR_OVERFLOW, "more than 8 nodes");
}

int main(void)
{
    test_targets();
    test_cluster_file();
    test_slurm_tasks();
    return check_summary("test_cluster");
}
