/* The catalogue of GPU systems: every entry consistent and sourced, its
 * cluster the one an equivalent cluster file gives, and a site's file. */
#include "check.h"

/* Every built-in entry: known device, NICs x speed = injection, GPUs x nodes
 * = partition, and sources with the date they were read. */
static void test_entries(void)
{
    CHECK(ds_system_count() >= 15);
    for (size_t i = 0; i < ds_system_count(); i++) {
        const ds_system_t *s = ds_system_at(i);
        CHECK_OK(ds_system_check(s));
        CHECK_MSG(strstr(s->source_node, "https://") != NULL, "%s: no node source", s->name);
        CHECK_MSG(strstr(s->source_network, "https://") != NULL ||
                      strstr(s->source_network, "not read") != NULL,
                  "%s: no network source", s->name);
        CHECK_MSG(s->source_charge[0] != '\0' && strlen(s->read_on) == 10,
                  "%s: no charge source or date read", s->name);
        CHECK_MSG(s->nics_per_node * s->nic_Gbps == s->injection_Gbps, "%s: NICs", s->name);
        ds_cluster_t c;
        CHECK_OK(ds_system_cluster(s, s->max_nodes > 0 ? 0 : 16, &c));
        CHECK_MSG(c.gpus_per_node == s->gpus_per_node &&
                      c.levels[1].nics_per_node == s->nics_per_node &&
                      c.levels[1].bandwidth_GBps == s->nic_Gbps / 8.0 &&
                      c.levels[0].bandwidth_GBps == s->intra_node_GBps &&
                      c.device.memory_GiB == s->gpu_memory_GiB &&
                      c.num_levels == (s->group_nodes > 0 ? 3 : 2),
                  "%s: cluster does not carry the entry", s->name);
        if (s->max_nodes > 0)
            CHECK_MSG(c.nodes == s->max_nodes, "%s: default nodes", s->name);
    }
    const ds_system_t *s;
    CHECK_OK(ds_system_lookup("jupiter-booster", &s));
    CHECK(s->gpus_per_node == 4 && s->max_nodes * 4 == 24000 && s->group_nodes == 240);
    CHECK_FAILS(ds_system_lookup("summit", &s), DS_ERR_INVALID_ARG,
                "system 'summit' is not known (accepted: perlmutter, polaris,");
}

static bool same_level(const ds_net_level_t *a, const ds_net_level_t *b)
{
    return a->latency_us == b->latency_us && a->bandwidth_GBps == b->bandwidth_GBps &&
           a->span == b->span && a->oversubscription == b->oversubscription &&
           a->nics_per_node == b->nics_per_node &&
           a->congestion_per_doubling == b->congestion_per_doubling && a->nvls == b->nvls &&
           a->sharp == b->sharp;
}

/* The hand-written cluster files of tests/data/systems, from the same public
 * pages, give the same cluster as the catalogue. */
static void test_equivalent_files(void)
{
    static const struct {
        const char *target, *file;
    } pairs[] = {
        {"system=perlmutter,nodes=64", DSMPI_TEST_DATA "/systems/perlmutter-64.json"},
        {"system=dgx-h100-superpod,nodes=96", DSMPI_TEST_DATA "/systems/dgx-h100-superpod-96.json"},
    };
    for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
        ds_cluster_t a, b;
        const ds_system_t *system;
        CHECK_OK(ds_system_parse_target(pairs[p].target, &a, &system));
        CHECK_OK(ds_cluster_load(pairs[p].file, &b));
        bool same = a.nodes == b.nodes && a.gpus_per_node == b.gpus_per_node &&
                    a.num_levels == b.num_levels && a.pat == b.pat &&
                    memcmp(&a.device, &b.device, sizeof(a.device)) == 0;
        for (int l = 0; same && l < a.num_levels; l++)
            same = same_level(&a.levels[l], &b.levels[l]);
        CHECK_MSG(same, "%s differs from %s", pairs[p].target, pairs[p].file);
    }
    ds_cluster_t c;
    const ds_system_t *system;
    CHECK_FAILS(ds_system_parse_target("system=perlmutter,nodes=1537", &c, &system),
                DS_ERR_INVALID_ARG,
                "1537 nodes are beyond system perlmutter's largest partition (accepted: 1 to "
                "1536 nodes of 4 GPUs)");
    CHECK_FAILS(ds_system_parse_target("system=aws-p5", &c, &system), DS_ERR_INVALID_ARG,
                "system aws-p5 publishes no partition size");
    CHECK_FAILS(ds_system_parse_target("system=polaris,racks=2", &c, &system), DS_ERR_INVALID_ARG,
                "target item 'racks=2' is not known after system=");
}

static void test_site_file(void)
{
    const char *site = "{\"systems\": [\n"
                       " {\"name\": \"perlmutter\", \"oversubscription\": 2},\n"
                       " {\"name\": \"lab-h100\", \"device\": \"h100-sxm\", \"gpus_per_node\": 8,\n"
                       "  \"nics_per_node\": 4, \"nic_Gbps\": 400, \"max_nodes\": 16,\n"
                       "  \"charge_unit\": \"GPU-hours\", \"charge_per_node_hour\": 8}]}";
    CHECK_OK(ds_systems_load_json(site, strlen(site), "site.json"));
    const ds_system_t *s;
    CHECK_OK(ds_system_lookup("perlmutter", &s));
    CHECK(s->oversubscription == 2.0 && s->max_nodes == 1536); /* changed, the rest kept */
    CHECK_OK(ds_system_lookup("lab-h100", &s));
    CHECK(s->injection_Gbps == 1600.0 && s->partition_gpus == 128 && s->gpu_memory_GiB == 80.0);
    CHECK(s->charge_per_node_hour == 8.0 && strcmp(s->charge_unit, "GPU-hours") == 0);
    ds_cluster_t c;
    CHECK_OK(ds_system_cluster(s, 4, &c));
    CHECK(c.levels[1].nics_per_node == 4 && c.levels[1].bandwidth_GBps == 50.0);
    CHECK_FAILS(
        ds_systems_load_json("{\"systems\": [{\"name\": \"x\", \"racks\": 2}]}", 40, "bad.json"),
        DS_ERR_BAD_FILE, "bad.json: systems[0]: key \"racks\" is not known");
    const char *no_device = "{\"systems\": [{\"name\": \"x\", \"gpus_per_node\": 4}]}";
    CHECK_FAILS(ds_systems_load_json(no_device, strlen(no_device), "new.json"), DS_ERR_BAD_FILE,
                "new system 'x' has no \"device\"");
    const char *nics = "{\"systems\": [{\"name\": \"polaris\", \"injection_Gbps\": 800}]}";
    CHECK_FAILS(ds_systems_load_json(nics, strlen(nics), "nics.json"), DS_ERR_BAD_FILE,
                "system polaris: 2 NICs x 200 Gb/s = 400 Gb/s, not the stated injection of 800");
    const char *nodes = "{\"systems\": [{\"name\": \"polaris\", \"max_nodes\": 600}]}";
    CHECK_FAILS(ds_systems_load_json(nodes, strlen(nodes), "nodes.json"), DS_ERR_BAD_FILE,
                "4 GPUs per node x 600 nodes = 2400, not the stated partition of 2240 GPUs");
    /* A failed file leaves the catalogue as the last good one left it. */
    CHECK_OK(ds_system_lookup("lab-h100", &s));
}

int main(void)
{
    test_entries();
    test_equivalent_files();
    test_site_file();
    return check_summary("test_systems");
}
