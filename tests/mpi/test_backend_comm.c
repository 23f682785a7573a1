/* Communication on the cpu backend (MPI): every primitive delivers the right
 * values in every dtype (2 and 4 ranks), and, with --timed (2 ranks, not
 * oversubscribed), measurements obey the statistics' invariants, agree on
 * every member, fill the communication model's sample and stop on the
 * budget. */
#include "check.h"

#include "backend/dsi_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int rank, size;

static ds_event_key_t comm_key(ds_comm_op_t op, ds_dtype_t dtype, int64_t bytes, int group)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = (uint8_t)op;
    key.dtype = (uint8_t)dtype;
    key.group_size = group;
    key.dims[0] = bytes;
    return key;
}

/* Wrong elements summed over the group. */
static int64_t verify(ds_comm_t *comm, const ds_event_key_t *key, MPI_Comm group)
{
    int64_t errors = -1, total = 0;
    ds_status_t status = ds_comm_verify(comm, key, &errors);
    CHECK_MSG(status == DS_OK, "verify %s: %s", ds_event_key_op_name(key), ds_last_error());
    MPI_Allreduce(&errors, &total, 1, MPI_INT64_T, MPI_SUM, group);
    return total;
}

static int fake_nodes; /* DS_COMM_FAKE_NODES=1: every member on a node of its own */

static void test_values(ds_backend_t *b)
{
    ds_comm_t *comm = NULL;
    CHECK_OK(ds_comm_create(b, MPI_COMM_WORLD, &comm));
    if (comm == NULL)
        return;
    CHECK_INT(ds_comm_size(comm), size);
    CHECK_INT(ds_comm_rank(comm), rank);
    CHECK_INT(ds_comm_nodes(comm), fake_nodes ? size : 1);
    CHECK_INT(ds_comm_ranks_per_node(comm), fake_nodes ? 1 : size);
    if (fake_nodes) {
        /* Cross-node alignment by ping-pong, here between processes that in
         * truth share one clock: the offset found must be ~0, within the
         * error bound, and the bound must be small and positive. */
        CHECK(comm->clock_error_s > 0.0 && comm->clock_error_s < 1e-3);
        CHECK_MSG(fabs(comm->clock_offset_s) <= comm->clock_error_s + 1e-6,
                  "offset %g s, error bound %g s", comm->clock_offset_s, comm->clock_error_s);
        CHECK(rank != 0 || comm->clock_offset_s == 0.0);
    }

    static const ds_comm_op_t collectives[] = {
        DS_COMM_ALLREDUCE, DS_COMM_ALLGATHER, DS_COMM_REDUCE_SCATTER, DS_COMM_ALLTOALL,
        DS_COMM_BROADCAST, DS_COMM_PS_PUSH,   DS_COMM_PS_PULL};
    static const ds_dtype_t dtypes[] = {DS_DTYPE_FP32, DS_DTYPE_BF16, DS_DTYPE_FP16};
    static const int64_t sizes[] = {8192, 1000, 1}; /* 1 byte: one element each */
    for (size_t o = 0; o < sizeof(collectives) / sizeof(collectives[0]); o++)
        for (size_t d = 0; d < 3; d++)
            for (size_t s = 0; s < 3; s++) {
                ds_event_key_t key = comm_key(collectives[o], dtypes[d], sizes[s], size);
                for (int servers = 1; servers <= 2; servers++) {
                    key.dims[1] = servers; /* parameter servers; ignored by the others */
                    CHECK_MSG(verify(comm, &key, MPI_COMM_WORLD) == 0, "%s %s %lld bytes",
                              ds_event_key_op_name(&key), ds_dtype_name(dtypes[d]),
                              (long long)sizes[s]);
                }
            }

    /* The group size in the key must match; point-to-point needs two. */
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    ds_comm_measurement_t m;
    ds_event_key_t key = comm_key(DS_COMM_ALLREDUCE, DS_DTYPE_FP32, 4096, size + 1);
    CHECK_FAILS(ds_comm_measure(comm, &key, &cfg, &m), DS_ERR_INVALID_ARG, "group of");
    key = comm_key(DS_COMM_ALLREDUCE, DS_DTYPE_FP32, 0, size);
    CHECK_FAILS(ds_comm_measure(comm, &key, &cfg, &m), DS_ERR_INVALID_ARG, "at least 1 byte");
    key.kind = DS_EVENT_COMPUTE;
    CHECK_FAILS(ds_comm_measure(comm, &key, &cfg, &m), DS_ERR_INVALID_ARG, "not a communication");
    if (size != 2) {
        key = comm_key(DS_COMM_SENDRECV, DS_DTYPE_FP32, 4096, 0);
        CHECK_FAILS(ds_comm_measure(comm, &key, &cfg, &m), DS_ERR_INVALID_ARG, "2 ranks");
    }
    ds_comm_destroy(comm);

    /* Point-to-point in pairs (0,1), (2,3): one direction and both at once. */
    MPI_Comm pair = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pair);
    int pair_size = 0;
    MPI_Comm_size(pair, &pair_size);
    if (pair_size == 2) {
        CHECK_OK(ds_comm_create(b, pair, &comm));
        for (int batched = 0; batched <= 1; batched++)
            for (size_t d = 0; d < 3; d++) {
                key = comm_key(DS_COMM_SENDRECV, dtypes[d], 65536, 2);
                key.flags = batched ? DS_COMM_FLAG_BATCHED : 0;
                CHECK_MSG(verify(comm, &key, pair) == 0, "sendrecv batched %d %s", batched,
                          ds_dtype_name(dtypes[d]));
            }
        ds_comm_destroy(comm);
    }
    MPI_Comm_free(&pair);
    ds_comm_destroy(NULL);
}

/* Every member got the same numbers. */
static int same_everywhere(double value)
{
    double lo = 0, hi = 0;
    MPI_Allreduce(&value, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&value, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

static void check_measurement(const ds_comm_measurement_t *m, const ds_event_key_t *key,
                              int64_t bytes, const ds_measure_config_t *cfg)
{
    const ds_measurement_t *c = &m->cost;
    const char *name = ds_event_key_op_name(key);
    CHECK_MSG(c->min_s <= c->cost.p10_s && c->cost.p10_s <= c->cost.median_s &&
                  c->cost.median_s <= c->cost.p90_s && c->cost.p90_s <= c->max_s,
              "%s: p10 %g median %g p90 %g", name, c->cost.p10_s, c->cost.median_s, c->cost.p90_s);
    CHECK_MSG(c->cost.median_s > 0.0 && c->cost.median_s < 0.05, "%s: median %g s", name,
              c->cost.median_s);
    CHECK(c->cost.repetitions >= cfg->min_reps && c->cost.repetitions <= cfg->max_reps);
    CHECK_INT(c->cost.provenance, DS_PROV_MEASURED);
    CHECK(m->skew.min_s >= 0.0 && m->skew.cost.repetitions == c->cost.repetitions);
    CHECK(fake_nodes ? m->clock_error_s > 0.0 : m->clock_error_s == 0.0); /* one node: one clock */
    const ds_comm_sample_t *s = &m->sample;
    CHECK_INT(s->op, key->op);
    CHECK_INT(s->dtype, key->dtype);
    CHECK_INT(s->bytes, bytes);
    CHECK_INT(s->group_size, size);
    CHECK_INT(s->nodes, fake_nodes ? size : 1);
    CHECK_INT(s->ranks_per_node, fake_nodes ? 1 : size);
    CHECK_INT(s->concurrency, 1);
    CHECK_INT(s->batched, (key->flags & DS_COMM_FLAG_BATCHED) != 0);
    CHECK(s->median_s == c->cost.median_s && s->p10_s == c->cost.p10_s &&
          s->p90_s == c->cost.p90_s && s->mean_s == c->cost.mean_s);
    CHECK_INT(s->repetitions, c->cost.repetitions);
    CHECK_INT(s->provenance, DS_PROV_MEASURED);
    CHECK(strncmp(s->source, "cpu:", 4) == 0 && strchr(s->source, '#') != NULL);
    CHECK_MSG(same_everywhere(c->cost.median_s) && same_everywhere(m->skew.cost.mean_s) &&
                  same_everywhere((double)c->cost.repetitions),
              "%s: members disagree", name);
}

static void test_timed(ds_backend_t *b)
{
    ds_comm_t *comm = NULL;
    CHECK_OK(ds_comm_create(b, MPI_COMM_WORLD, &comm));
    if (comm == NULL)
        return;
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    cfg.min_reps = 5;
    cfg.max_reps = 200;
    cfg.budget_s = 0.15;
    cfg.target_rel_ci = 0.05;
    static const ds_comm_op_t all[] = {DS_COMM_SENDRECV,       DS_COMM_ALLREDUCE, DS_COMM_ALLGATHER,
                                       DS_COMM_REDUCE_SCATTER, DS_COMM_ALLTOALL,  DS_COMM_BROADCAST,
                                       DS_COMM_PS_PUSH,        DS_COMM_PS_PULL};
    ds_comm_measurement_t m;
    for (size_t o = 0; o < sizeof(all) / sizeof(all[0]); o++) {
        for (int batched = 0; batched <= (all[o] == DS_COMM_SENDRECV); batched++) {
            ds_event_key_t key = comm_key(all[o], DS_DTYPE_BF16, 65536, 2);
            key.flags = batched ? DS_COMM_FLAG_BATCHED : 0;
            CHECK_OK(ds_comm_measure(comm, &key, &cfg, &m));
            check_measurement(&m, &key, 65536, &cfg);
            if (rank == 0)
                printf("%-14s %s 64 KiB: median %.2f us (p10 %.2f, p90 %.2f, %lld reps, %s), "
                       "skew median %.2f us\n",
                       ds_event_key_op_name(&key), batched ? "batched" : "single ",
                       m.cost.cost.median_s * 1e6, m.cost.cost.p10_s * 1e6, m.cost.cost.p90_s * 1e6,
                       (long long)m.cost.cost.repetitions, ds_stop_reason_name(m.cost.stop),
                       m.skew.cost.median_s * 1e6);
        }
    }
    /* Sizes that are not a multiple of the group: the sample says what moved. */
    ds_event_key_t key = comm_key(DS_COMM_ALLGATHER, DS_DTYPE_FP32, 1001, 0);
    CHECK_OK(ds_comm_measure(comm, &key, &cfg, &m));
    CHECK_INT(m.sample.bytes, 1000); /* 125 floats from each of 2 ranks */

    /* 16 MiB costs more than 4 KiB. */
    ds_comm_measurement_t small, large;
    key = comm_key(DS_COMM_ALLREDUCE, DS_DTYPE_FP32, 4096, 2);
    CHECK_OK(ds_comm_measure(comm, &key, &cfg, &small));
    key.dims[0] = 16 << 20;
    CHECK_OK(ds_comm_measure(comm, &key, &cfg, &large));
    CHECK_MSG(large.cost.cost.median_s > 10.0 * small.cost.cost.median_s, "4 KiB %g s, 16 MiB %g s",
              small.cost.cost.median_s, large.cost.cost.median_s);

    /* Never converging: the budget stops it on every member at once. */
    cfg.target_rel_ci = 0.0;
    cfg.max_reps = 1000000;
    cfg.budget_s = 0.1;
    key = comm_key(DS_COMM_ALLREDUCE, DS_DTYPE_FP32, 4096, 2);
    CHECK_OK(ds_comm_measure(comm, &key, &cfg, &m));
    CHECK_INT(m.cost.stop, DS_STOP_BUDGET);
    CHECK_MSG(m.cost.wall_s >= 0.1 && m.cost.wall_s < 0.6, "wall %g", m.cost.wall_s);
    CHECK(m.cost.cost.repetitions >= 5);
    CHECK(same_everywhere(m.cost.wall_s) && same_everywhere((double)m.cost.cost.repetitions));
    /* In situ: right after the GEMM that produces the reduced tensor. */
    ds_event_key_t gemm;
    memset(&gemm, 0, sizeof(gemm));
    gemm.kind = DS_EVENT_COMPUTE;
    gemm.op = DS_OP_GEMM;
    gemm.dtype = DS_DTYPE_FP32;
    gemm.variant = DS_GEMM_TRANS_B;
    gemm.dims[0] = 256;
    gemm.dims[1] = 256;
    gemm.dims[2] = 256;
    gemm.dims[3] = 1;
    ds_kernel_t *producer = NULL;
    CHECK_OK(ds_kernel_prepare(b, &gemm, &producer));
    ds_measure_config_default(&cfg);
    cfg.budget_s = 0.15;
    key = comm_key(DS_COMM_ALLREDUCE, DS_DTYPE_FP32, 256 * 256 * 4, 2);
    CHECK_OK(ds_comm_measure_after(comm, &key, producer, &cfg, &m));
    check_measurement(&m, &key, 256 * 256 * 4, &cfg);
    CHECK_INT(m.after_compute, 1);
    if (rank == 0)
        printf("allreduce 256 KiB after a 256^3 GEMM: median %.2f us, skew median %.2f us\n",
               m.cost.cost.median_s * 1e6, m.skew.cost.median_s * 1e6);
    CHECK_OK(ds_comm_measure(comm, &key, &cfg, &m));
    CHECK_INT(m.after_compute, 0);
    CHECK_FAILS(ds_comm_measure_after(comm, &key, NULL, &cfg, &m), DS_ERR_INVALID_ARG, "producer");
    ds_backend_t *other = NULL;
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &other));
    ds_kernel_t *foreign = NULL;
    CHECK_OK(ds_kernel_prepare(other, &gemm, &foreign));
    CHECK_FAILS(ds_comm_measure_after(comm, &key, foreign, &cfg, &m), DS_ERR_INVALID_ARG,
                "another backend");
    ds_kernel_destroy(foreign);
    ds_backend_close(other);
    ds_kernel_destroy(producer);

    /* The cap. */
    cfg.target_rel_ci = 0.0;
    cfg.max_reps = 9;
    cfg.budget_s = 100.0;
    CHECK_OK(ds_comm_measure(comm, &key, &cfg, &m));
    CHECK_INT(m.cost.stop, DS_STOP_MAX_REPS);
    CHECK_INT(m.cost.cost.repetitions, 9);
    ds_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ds_log_set_rank(rank);
    int timed = argc > 1 && strcmp(argv[1], "--timed") == 0;
    const char *fake = getenv("DS_COMM_FAKE_NODES");
    fake_nodes = fake != NULL && atoi(fake) == 1;
    ds_backend_t *b = NULL;
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &b));
    if (b != NULL) {
        test_values(b);
        if (timed)
            test_timed(b);
        ds_backend_close(b);
    }
    int failed = check_failures != 0, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int code = rank == 0 ? (any ? 1 : check_summary("test_backend_comm")) : failed;
    if (rank != 0 && failed)
        check_summary("test_backend_comm");
    MPI_Finalize();
    return code;
}
