/*
 * The profiling plan: which unique events this allocation measures, grouped
 * and assigned to ranks, before anything runs.
 *
 * Compute events are measured as whole layer passes ("units"): the operators
 * of one pass run back to back as training runs them, each timed in context
 * (METHOD.md, measuring in context).  Units are deduplicated by their key
 * sequence and spread over the ranks by longest-processing-time-first on a
 * roofline estimate, so ranks finish together.  Communication is measured by
 * groups the allocation can form (inside a node, across nodes, two groups at
 * once), at the exact sizes the target needs plus a power-of-two sweep for
 * the model fit; one task at a time.
 */
#ifndef DSI_PROFILE_H
#define DSI_PROFILE_H

#include <dsmpi/cluster.h>
#include <dsmpi/events.h>

#include "dsi_core.h"

typedef struct dsi_unit {
    uint64_t hash;       /* of the key sequence */
    size_t first_key;    /* into plan->keys */
    size_t num_keys;
    double estimate_s;   /* one run of the unit on the profiling device */
    int rank;            /* who measures it; -1 = nobody (already measured) */
    char label[64];      /* "gpt2-medium layer 0 fwd" */
} dsi_unit_t;

/* One communication measurement: `num_groups` groups of `sample.group_size`
 * ranks each run `sample.op` of `sample.bytes` at the same time. */
typedef struct dsi_comm_task {
    ds_comm_sample_t sample; /* what is measured (layout fields filled; times empty) */
    int num_groups;
    int shape;               /* index of the group shape (for communicator reuse) */
    int exact;               /* a size some target event has (else a sweep point) */
} dsi_comm_task_t;

/* A set of groups of the allocation; ranks[g * size + i]. */
typedef struct dsi_group_shape {
    int size;
    int nodes;
    int ranks_per_node;
    int num_groups; /* 1, or 2 for a concurrency measurement */
    int *ranks;
} dsi_group_shape_t;

typedef struct dsi_profile_plan {
    ds_event_set_t *events;  /* union of every added strategy's events */
    ds_event_key_t *keys;    /* unit key sequences, concatenated */
    size_t num_keys, keys_capacity;
    dsi_unit_t *units;
    size_t num_units, units_capacity;
    dsi_group_shape_t *shapes;
    int num_shapes;
    dsi_comm_task_t *tasks;
    size_t num_tasks, tasks_capacity;
    int num_ranks;
    double *rank_load_s; /* predicted busy time of each rank */
    size_t units_to_measure;
    size_t units_reused;
} dsi_profile_plan_t;

ds_status_t dsi_profile_plan_create(dsi_profile_plan_t **plan_p);
void dsi_profile_plan_destroy(dsi_profile_plan_t *plan);

/* Adds the units and events of one (model, strategy, target). */
ds_status_t dsi_profile_plan_add(dsi_profile_plan_t *plan, const ds_model_t *model,
                                 const ds_strategy_t *strategy, const ds_cluster_t *target);

/* Assigns units to `num_ranks` ranks (node_of_rank[r] = node index), skipping
 * units whose keys all have a cost in `measured` (may be NULL), estimating
 * on `device`; then lists the communication tasks with sizes from
 * `sweep_min` to `sweep_max` bytes (powers of two). */
ds_status_t dsi_profile_plan_assign(dsi_profile_plan_t *plan, int num_ranks, const int *node_of_rank,
                                    const ds_cost_table_t *measured, const ds_device_spec_t *device,
                                    int64_t sweep_min, int64_t sweep_max);

#endif /* DSI_PROFILE_H */
