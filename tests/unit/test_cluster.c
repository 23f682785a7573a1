/* Target clusters, device specs and Slurm's task lists. */
#include "check.h"

#include <glob.h>

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
    CHECK(c.levels[0].bandwidth_GBps == 300.0 && c.levels[1].bandwidth_GBps == 25.0);
    /* A cluster of the default device moved onto another takes its links too. */
    ds_device_spec_t a100;
    CHECK_OK(ds_cluster_from_gpus(&c, 1024, 8));
    CHECK(c.levels[0].bandwidth_GBps == 450.0 && c.levels[1].bandwidth_GBps == 50.0);
    CHECK_OK(ds_device_spec_lookup("a100-80g", &a100));
    ds_cluster_on_device(&c, &a100);
    CHECK(strcmp(c.device.name, "a100-80g") == 0 && strcmp(c.name, "128x8-a100-80g") == 0);
    CHECK(c.num_levels == 2 && c.levels[0].bandwidth_GBps == 300.0 && c.levels[0].span == 8);
    CHECK(c.levels[1].bandwidth_GBps == 25.0 && c.levels[1].latency_us == 5.0 &&
          c.levels[1].nics_per_node == 8 && c.nodes == 128);
    CHECK_FAILS(ds_cluster_from_gpus(&c, 12, 8), DS_ERR_INVALID_ARG,
                "target-gpus 12 is not a multiple of 8 devices per node");
    CHECK_FAILS(ds_cluster_from_gpus(&c, 1000000000000LL, 8), DS_ERR_INVALID_ARG,
                "target-gpus 1000000000000 is out of range (accepted: 1 to 1048576)");
    CHECK_FAILS(ds_cluster_parse_target("nodes=0", &c), DS_ERR_INVALID_ARG,
                "nodes 0 is out of range");
    CHECK_FAILS(ds_cluster_parse_target("nodes=4,gpus-per-node=2000", &c), DS_ERR_INVALID_ARG,
                "gpus-per-node 2000 is out of range (accepted: 1 to 1024)");
    CHECK_FAILS(ds_cluster_parse_target("nodes=4,device=tpu-v5", &c), DS_ERR_INVALID_ARG,
                "device 'tpu-v5' is not known (accepted: a100-40g, a100-80g, h100-sxm, h100-pcie, "
                "h200, gh200, b200, cpu)");
    CHECK_FAILS(ds_cluster_parse_target("racks=4", &c), DS_ERR_INVALID_ARG,
                "target key 'racks' is not known");
    CHECK_FAILS(ds_cluster_parse_target("gpus-per-node=8", &c), DS_ERR_INVALID_ARG,
                "names no nodes");
}

static void test_cluster_file(void)
{
    const char *json =
        "{\"name\": \"fat-tree\", \"nodes\": 64, \"gpus_per_node\": 8, \"device\": \"h100-sxm\",\n"
        " \"device_memory_GiB\": 80, \"peak_tflops\": 900,\n"
        " \"levels\": [{\"name\": \"nvlink\", \"latency_us\": 1.5, \"bandwidth_GBps\": 400},\n"
        "            {\"name\": \"leaf\", \"latency_us\": 4, \"bandwidth_GBps\": 50, \"span\": 16, "
        "\"nics_per_node\": 8},\n"
        "            {\"name\": \"spine\", \"latency_us\": 6, \"bandwidth_GBps\": 50, "
        "\"oversubscription\": 2}]}";
    ds_cluster_t c;
    CHECK_OK(ds_cluster_load_json(json, strlen(json), "fat-tree.json", &c));
    CHECK(strcmp(c.name, "fat-tree") == 0 && c.nodes == 64 && c.num_levels == 3);
    CHECK(c.device.peak_tflops_bf16 == 900.0);
    CHECK(c.levels[0].latency_us == 1.5 && c.levels[0].span == 8);
    CHECK(c.levels[1].span == 16 && c.levels[1].nics_per_node == 8);
    CHECK(c.levels[2].oversubscription == 2.0 && strcmp(c.levels[2].name, "spine") == 0);
    const char *bad = "{\"nodes\": 4, \"gpus_per_node\": 8, \"levels\": [{\"latency_us\": -1, "
                      "\"bandwidth_GBps\": 5}]}";
    CHECK_FAILS(ds_cluster_load_json(bad, strlen(bad), "bad.json", &c), DS_ERR_BAD_FILE,
                "bad.json: levels[0]: \"latency_us\" = -1 is out of range");
    const char *missing = "{\"gpus_per_node\": 8}";
    CHECK_FAILS(ds_cluster_load_json(missing, strlen(missing), "m.json", &c), DS_ERR_BAD_FILE,
                "m.json: required field \"nodes\" is missing");
}

/* One level list in a file of 64 nodes of 8 devices. */
static ds_status_t load_levels(const char *levels, ds_cluster_t *c)
{
    char json[2048];
    snprintf(json, sizeof(json), "{\"nodes\": 64, \"gpus_per_node\": 8, \"levels\": [%s]}", levels);
    return ds_cluster_load_json(json, strlen(json), "c.json", c);
}

#define NVLINK "{\"latency_us\": 2, \"bandwidth_GBps\": 450}"
#define LEAF(extra) "{\"latency_us\": 4, \"bandwidth_GBps\": 50" extra "}"

/* Keys the format does not have, and keys that would change nothing, fail
 * the file: one line naming the key, the file and what is accepted. */
static void test_cluster_file_refusals(void)
{
    ds_cluster_t c;
    const char *top = "{\"nodes\": 4, \"gpus_per_node\": 8, \"topology\": \"dragonfly\"}";
    CHECK_FAILS(ds_cluster_load_json(top, strlen(top), "df.json", &c), DS_ERR_BAD_FILE,
                "df.json: key \"topology\" is not known (accepted: name, nodes, gpus_per_node, "
                "device, device_memory_GiB, peak_tflops, mem_bw_GBps, levels, pat)");
    CHECK_FAILS(
        load_levels(NVLINK ", " LEAF(", \"spann\": 16"), &c), DS_ERR_BAD_FILE,
        "c.json: levels[1]: key \"spann\" is not known (accepted: name, latency_us, "
        "bandwidth_GBps, span, oversubscription, nics_per_node, congestion_per_doubling, sharp)");
    CHECK_FAILS(
        load_levels("{\"latency_us\": 2, \"bandwidth_GBps\": 450, \"nics_per_node\": 8}", &c),
        DS_ERR_BAD_FILE,
        "c.json: levels[0]: key \"nics_per_node\" is not known (accepted: name, latency_us, "
        "bandwidth_GBps, span, nvls; level 0 joins the devices of a node");
    CHECK_FAILS(
        load_levels(NVLINK ", " LEAF(", \"span\": 16") ", " LEAF(", \"nics_per_node\": 4"), &c),
        DS_ERR_BAD_FILE,
        "c.json: levels[2]: key \"nics_per_node\" is not known (accepted: name, latency_us, "
        "bandwidth_GBps, span, oversubscription, congestion_per_doubling, sharp; a node's NICs are "
        "given on levels[1])");
    /* A key with a newline is shown on one line. */
    const char *odd = "{\"nodes\": 4, \"gpus_per_node\": 8, \"a\\nb\": 1}";
    CHECK_FAILS(ds_cluster_load_json(odd, strlen(odd), "odd.json", &c), DS_ERR_BAD_FILE,
                "odd.json: key \"a?b\" is not known");
    /* The in-switch reductions and PAT: booleans, off unless declared. */
    CHECK_OK(load_levels(NVLINK ", " LEAF(""), &c));
    CHECK(!c.levels[0].nvls && !c.levels[1].sharp && !c.pat);
    CHECK_OK(load_levels("{\"latency_us\": 2, \"bandwidth_GBps\": 450, \"nvls\": true}, " LEAF(
                             ", \"span\": 16, \"sharp\": true") ", " LEAF(""),
                         &c));
    CHECK(c.levels[0].nvls && c.levels[1].sharp && !c.levels[2].sharp);
    CHECK_FAILS(load_levels(NVLINK ", " LEAF(", \"sharp\": 1"), &c), DS_ERR_BAD_FILE,
                "c.json: levels[1]: \"sharp\" is not true or false");
    CHECK_FAILS(load_levels(NVLINK ", " LEAF(", \"nvls\": true"), &c), DS_ERR_BAD_FILE,
                "c.json: levels[1]: key \"nvls\" is not known");
    const char *pat = "{\"nodes\": 4, \"gpus_per_node\": 1, \"pat\": \"yes\"}";
    CHECK_FAILS(ds_cluster_load_json(pat, strlen(pat), "pat.json", &c), DS_ERR_BAD_FILE,
                "pat.json: \"pat\" is not true or false");
    pat = "{\"nodes\": 4, \"gpus_per_node\": 1, \"pat\": true}";
    CHECK_OK(ds_cluster_load_json(pat, strlen(pat), "pat.json", &c));
    CHECK(c.pat);
    CHECK(strchr(ds_last_error(), '\n') == NULL);
    /* Placements the model would ignore. */
    CHECK_FAILS(load_levels(NVLINK ", " LEAF("") ", " LEAF(""), &c), DS_ERR_BAD_FILE,
                "c.json: levels[1] has no \"span\" (it joins all nodes) but levels[2] is above it");
    CHECK_FAILS(load_levels(NVLINK
                            ", " LEAF(", \"span\": 16") ", " LEAF(", \"span\": 8") ", " LEAF(""),
                            &c),
                DS_ERR_BAD_FILE, "c.json: levels[2].span 8 is not larger than levels[1].span 16");
    CHECK_FAILS(load_levels(NVLINK ", " LEAF(", \"span\": 16"), &c), DS_ERR_BAD_FILE,
                "c.json: levels[1].span 16 splits the 64 nodes into domains no level joins");
    CHECK_FAILS(
        load_levels(NVLINK ", " LEAF(", \"oversubscription\": 2"), &c), DS_ERR_BAD_FILE,
        "c.json: levels[1]: \"oversubscription\" = 2 has no level above levels[1] to apply to");
    CHECK_FAILS(load_levels("{\"latency_us\": 2, \"bandwidth_GBps\": 450, \"span\": 4}", &c),
                DS_ERR_BAD_FILE, "c.json: levels[0].span 4 disagrees with \"gpus_per_node\" 8");
    /* What is accepted: a level 0 span equal to the node, a last span
     * covering the nodes, oversubscription where a level is above. */
    CHECK_OK(load_levels("{\"latency_us\": 2, \"bandwidth_GBps\": 450, \"span\": 8}, " LEAF(
                             ", \"span\": 64, \"oversubscription\": 1"),
                         &c));
    CHECK(c.num_levels == 2 && c.levels[0].span == 8 && c.levels[1].span == 64);
    CHECK_OK(
        load_levels(NVLINK ", " LEAF(", \"span\": 16, \"oversubscription\": 2") ", " LEAF(""), &c));
    CHECK(c.num_levels == 3 && c.levels[1].oversubscription == 2.0);
}

/* Every cluster file the project ships still loads. */
static void test_shipped_cluster_files(void)
{
    static const char *const patterns[] = {"smpi/*.json",
                                           "../fuzz/corpus/fuzz_cluster_json/*.json"};
    size_t loaded = 0;
    for (size_t p = 0; p < sizeof(patterns) / sizeof(patterns[0]); p++) {
        char pattern[4096];
        snprintf(pattern, sizeof(pattern), "%s/%s", DSMPI_TEST_DATA, patterns[p]);
        glob_t found;
        CHECK(glob(pattern, 0, NULL, &found) == 0);
        for (size_t i = 0; i < found.gl_pathc; i++) {
            ds_cluster_t c;
            CHECK_OK(ds_cluster_load(found.gl_pathv[i], &c));
            CHECK(c.num_levels >= 2 && c.levels[1].nics_per_node == c.gpus_per_node);
            loaded++;
        }
        globfree(&found);
    }
    CHECK(loaded >= 8);
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
    CHECK_FAILS(ds_slurm_parse_tasks_per_node("1(x9)", counts, 8, &n), DS_ERR_OVERFLOW,
                "more than 8 nodes");
}

int main(void)
{
    test_targets();
    test_cluster_file();
    test_cluster_file_refusals();
    test_shipped_cluster_files();
    test_slurm_tasks();
    return check_summary("test_cluster");
}
