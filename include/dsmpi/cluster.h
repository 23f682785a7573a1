/*
 * dsmpi clusters: the target cluster a prediction is for (nodes, devices,
 * network levels), device specifications, and the allocation dsmpi is
 * running on (detected from MPI and Slurm).
 */
#ifndef DSMPI_CLUSTER_H
#define DSMPI_CLUSTER_H

#include <dsmpi/core.h>

#include <mpi.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS_MAX_NET_LEVELS 4
#define DS_NAME_MAX 64

/* A device model: what a roofline estimate and the memory check need. */
typedef struct ds_device_spec {
    char name[32];
    double memory_GiB;
    double peak_tflops_bf16; /* dense tensor-core peak, also fp16 */
    double peak_tflops_fp32; /* without TF32 */
    double mem_bw_GBps;
    double intra_node_GBps; /* per device, one direction (NVLink) */
    double intra_node_latency_us;
    double network_GBps; /* per device, one direction: the NIC share systems with it have */
    double network_latency_us;
} ds_device_spec_t;

/* Looks up a device by name (a100-40g, a100-80g, h100-sxm, h100-pcie, h200, gh200, b200, cpu). */
DS_API ds_status_t ds_device_spec_lookup(const char *name, ds_device_spec_t *spec);
/* The spec of a device as a backend names it ("NVIDIA H200", "NVIDIA
 * A100-SXM4-80GB", a CPU model name for kind "cpu"); DS_ERR_NOT_FOUND when
 * no spec matches. */
DS_API ds_status_t ds_device_spec_match(const char *backend_kind, const char *device_name,
                                        ds_device_spec_t *spec);
DS_API size_t ds_device_spec_count(void);
DS_API const char *ds_device_spec_name(size_t index);

/* ---- device model -------------------------------------------------------
 * What decides the speed kernels achieve on a device, for devices that were
 * not profiled: the facts of the datasheets (each row's source is beside it
 * in libdsmpi/cluster/device_model.c) and the achieved fractions of peak,
 * which are guesses where no measurement is cited (`guessed` says so;
 * `bf16_cited` and `fp8_cited` mark fractions taken from published GEMM
 * timings). */

typedef struct ds_device_model {
    char name[32];
    int sm_count; /* streaming multiprocessors; 0: no wave quantisation (cpu) */
    double boost_clock_MHz;
    double peak_tflops_bf16; /* dense tensor peak, also fp16 */
    double peak_tflops_fp32; /* without TF32 */
    double peak_tflops_tf32; /* dense; 0 where the device has none */
    double peak_tflops_fp8;  /* dense; 0 where the device has none */
    double mem_bw_GBps;
    double memory_GiB;
    double l2_MiB;
    double nvlink_GBps;        /* per device, one direction */
    double pcie_GBps;          /* one direction */
    double launch_us;          /* kernel launch and synchronisation floor */
    double gemm_fraction_bf16; /* of peak, large GEMMs (full waves, long K) */
    double gemm_fraction_fp32;
    double gemm_fraction_fp8;
    double stream_fraction; /* of mem_bw_GBps, streaming kernels (STREAM-like) */
    int guessed;            /* a fraction is a guess, not a cited measurement */
    int bf16_cited;         /* gemm_fraction_bf16 is set from published GEMM timings */
    int fp8_cited;          /* gemm_fraction_fp8 is set from published GEMM timings */
    int stream_k; /* multi-wave GEMMs run as persistent stream-K kernels: no partial wave */
} ds_device_model_t;

/* The model of a device named like ds_device_spec_lookup's names, plus
 * h100-pcie and gh200; DS_ERR_INVALID_ARG naming the accepted ones. */
DS_API ds_status_t ds_device_model_lookup(const char *name, ds_device_model_t *model_p);
DS_API size_t ds_device_model_count(void);
/* The index-th model (NULL past the end); static storage. */
DS_API const ds_device_model_t *ds_device_model_at(size_t index);
/* Whether FP8 training runs on `spec`: DS_OK on devices with fp8 tensor
 * cores and on the cpu (its backend computes fp8 GEMMs as bf16 and says so
 * in its fingerprint); else DS_ERR_INVALID_ARG, one line naming `what` (the
 * strategy's fp8 item), the device and the devices that have them. */
DS_API ds_status_t ds_device_check_fp8(const ds_device_spec_t *spec, const char *what);

/* A GEMM as cuBLAS runs it on the model: output tiles, waves of tiles over
 * the SMs, a K-loop efficiency, and the memory-bound regime. */
typedef struct ds_gemm_estimate {
    double seconds;   /* launch + max(compute, memory) */
    double compute_s; /* waves x one tile's time */
    double memory_s;  /* bytes of A, B and C over the achievable bandwidth */
    double achieved_tflops;
    double peak_tflops;  /* of the dtype */
    int tile_m, tile_n;  /* the output tile the estimate chose (the fastest) */
    int64_t tiles;       /* output tiles, over the batch */
    double waves;        /* ceil(tiles / SMs), or tiles / SMs past one with stream_k */
    double k_efficiency; /* K / (K + the K-loop prologue and epilogue) */
    int memory_bound;
} ds_gemm_estimate_t;

/* C[m,n] = A[m,k] B[k,n], `batch` times (1 for a plain GEMM), in `dtype`.
 * The spec's peaks and bandwidth are those of `model` unless the caller
 * changed them. DS_ERR_INVALID_ARG for dims below 1 or a dtype the device
 * lacks. */
DS_API ds_status_t ds_device_model_gemm(const ds_device_model_t *model, ds_dtype_t dtype, int64_t m,
                                        int64_t n, int64_t k, int64_t batch,
                                        ds_gemm_estimate_t *estimate_p);

/* One level of the network: level 0 joins the devices of a node, level 1
 * the nodes of a leaf switch (or all nodes), higher levels what is above. */
typedef struct ds_net_level {
    char name[16];
    double latency_us;       /* one hop, one message */
    double bandwidth_GBps;   /* one direction, GB/s (10^9): level 0 per device, level >= 1 per
                                network interface (one per device unless nics_per_node says) */
    int span;                /* level 0: devices per node; level >= 1: nodes per domain (0 = all) */
    double oversubscription; /* >= 1: a group whose highest level is L >= 2 gets its network
                                bandwidth divided by the larger of levels L-1 and L's (the
                                uplinks of a level L-1 domain, said on either level) */
    int nics_per_node;       /* level 1: network interfaces per node (the model reads level 1's) */
    double congestion_per_doubling; /* level >= 1, 0 to 0.9: share of the level's bandwidth lost
                                       per doubling of the domains a group spans beyond those
                                       measured (flows of many rings and trees sharing uplinks,
                                       routing, congestion); the prior where the logs do not
                                       cover two node counts across nodes */
    bool congestion_given;          /* congestion_per_doubling was set (a cluster file);
                                       false: DS_COMM_CONGESTION_PRIOR's */
    bool nvls;  /* level 0: NVLink SHARP, the NVSwitches reduce and multicast (H100/H200/B200
                   with NVLink 4+ switches; default false) */
    bool sharp; /* level >= 1: the level's switches reduce (InfiniBand SHARP, NCCL's CollNet;
                   default false) */
} ds_net_level_t;

/* The target cluster. */
typedef struct ds_cluster {
    char name[DS_NAME_MAX];
    int64_t nodes;
    int gpus_per_node;
    ds_device_spec_t device;
    int num_levels;
    ds_net_level_t levels[DS_MAX_NET_LEVELS];
    bool pat; /* NCCL 2.23+ runs PAT all-gather / reduce-scatter at one device per node
                 (default false: as NCCL before 2.23) */
} ds_cluster_t;

/* A cluster of `nodes` x `gpus_per_node` devices named `device` (NULL: the
 * DS_DEFAULT_DEVICE tunable), with two network levels derived from the
 * device (NVLink inside a node, one NIC per device across nodes, at the
 * device's nominal bandwidths: ds_device_spec_t);
 * those network numbers are assumptions until measured or imported. */
DS_API ds_status_t ds_cluster_init(ds_cluster_t *cluster, int64_t nodes, int gpus_per_node,
                                   const char *device);

/* "--target-gpus N" (gpus_per_node 0 = the DS_GPUS_PER_NODE tunable; N must
 * be a multiple when above it). */
DS_API ds_status_t ds_cluster_from_gpus(ds_cluster_t *cluster, int64_t gpus, int gpus_per_node);

/* Puts a cluster built from its size (ds_cluster_init, ds_cluster_from_gpus)
 * on `device`: the device, the name, and the two network levels of its
 * nominal links, as ds_cluster_init derives them.  Not for a cluster whose
 * network came from a file or a system: set `device` alone there. */
DS_API void ds_cluster_on_device(ds_cluster_t *cluster, const ds_device_spec_t *device);

/* "--target nodes=128,gpus-per-node=8[,device=h100-sxm]". */
DS_API ds_status_t ds_cluster_parse_target(const char *text, ds_cluster_t *cluster);

/* A cluster JSON file (every key, unit and default: README.md, "Cluster
 * files"):
 *   {"name": "...", "nodes": 128, "gpus_per_node": 8, "device": "h100-sxm",
 *    "device_memory_GiB": 80, "peak_tflops": 989, "mem_bw_GBps": 3350,
 *    "levels": [{"name": "nvlink", "latency_us": 2, "bandwidth_GBps": 450},
 *               {"name": "ib", "latency_us": 5, "bandwidth_GBps": 50,
 *                "span": 32, "oversubscription": 1, "nics_per_node": 8},
 *               {"name": "spine", "latency_us": 7, "bandwidth_GBps": 50,
 *                "oversubscription": 2}]}
 * A key the format does not have, at any level, fails the file (naming the
 * key and those accepted there), and so do keys that would change nothing:
 * a level 0 span other than gpus_per_node, a level without span below
 * another, spans not growing with the level, a last level's span below the
 * nodes, an oversubscription on levels[1] when it is the last level. */
DS_API ds_status_t ds_cluster_load(const char *path, ds_cluster_t *cluster);
DS_API ds_status_t ds_cluster_load_json(const char *text, size_t size, const char *origin,
                                        ds_cluster_t *cluster);

DS_API int64_t ds_cluster_num_gpus(const ds_cluster_t *cluster);

/* The cluster (of file `origin`) set to `gpus` devices on its own network,
 * device and devices per node: gpus / gpus_per_node nodes, or a part of one
 * node when fewer.  More nodes than the file's are accepted (its top level
 * joins them); callers say so. */
DS_API ds_status_t ds_cluster_set_gpus(ds_cluster_t *cluster, int64_t gpus, const char *origin);
/* Fails when `gpus_per_node` (> 0: given by the user; 0: not given)
 * contradicts the devices per node of the cluster of file `origin`: the
 * file's spans, NICs and bandwidths are per node of its own size. */
DS_API ds_status_t ds_cluster_check_gpus_per_node(const ds_cluster_t *cluster, int gpus_per_node,
                                                  const char *origin);

/* ---- catalogue of GPU systems ----------------------------------------------
 * Built-in descriptions of real GPU systems from their public documentation
 * (libdsmpi/cluster/systems.c: every entry with its sources and the date they
 * were read), overridden or extended by a site's file (ds_systems_load).  A
 * system gives the cluster an equivalent cluster file gives. */

#define DS_SYSTEM_TEXT_MAX 256

typedef struct ds_system {
    char name[DS_NAME_MAX]; /* what --target system= takes: "perlmutter" */
    char title[96];         /* "NERSC Perlmutter, GPU nodes (A100 40 GB)" */
    char device[32];        /* a ds_device_spec_lookup name */
    double gpu_memory_GiB;  /* per GPU, as published (vendors' "GB" of HBM) */
    int gpus_per_node;
    char intra_node[96];    /* the link inside a node, in words */
    double intra_node_GBps; /* per GPU, one direction */
    bool nvls;              /* NVLink SHARP in the node's NVSwitches */
    int nics_per_node;
    double nic_Gbps;         /* per NIC, one direction, Gb/s */
    double injection_Gbps;   /* per node as the site states it (checked: NICs x speed) */
    char topology[96];       /* "dragonfly", "dragonfly+", "fat tree", "rail-optimised fat tree" */
    int group_nodes;         /* nodes of a group, cell or scalable unit (0: one level joins all) */
    int groups;              /* groups of the partition as published (0: not published) */
    double oversubscription; /* between groups (1: none) */
    int64_t max_nodes;       /* largest partition, nodes (0: not published, nodes= required) */
    int64_t partition_gpus;  /* GPUs of that partition as the site states (checked) */
    char charge_unit[32];    /* "node-hours", "GPU-hours", "instance-hours", ... */
    double charge_per_node_hour;             /* units one node-hour costs */
    bool charge_published;                   /* false: the unit and factor are dsmpi's default */
    char nccl_tests[DS_SYSTEM_TEXT_MAX];     /* public nccl-tests results, or none */
    char source_node[DS_SYSTEM_TEXT_MAX];    /* URL(s) of GPUs, node and partition */
    char source_network[DS_SYSTEM_TEXT_MAX]; /* URL(s) of NICs and topology */
    char source_charge[DS_SYSTEM_TEXT_MAX];  /* URL(s) of the charging */
    char read_on[16];                        /* date the sources were read, YYYY-MM-DD */
    char not_published[512];                 /* what the sources do not say and the default used */
} ds_system_t;

/* The systems known now: the built-in ones with a loaded site file's merged in. */
DS_API size_t ds_system_count(void);
/* The index-th system (NULL past the end); valid until the next ds_systems_load. */
DS_API const ds_system_t *ds_system_at(size_t index);
/* DS_ERR_INVALID_ARG naming the accepted names. */
DS_API ds_status_t ds_system_lookup(const char *name, const ds_system_t **system_p);
/* The entry's internal consistency: its device is known, NICs x speed is the
 * stated injection bandwidth, GPUs per node x nodes the stated partition,
 * groups within the partition.  DS_ERR_BAD_FILE with the first problem. */
DS_API ds_status_t ds_system_check(const ds_system_t *system);
/* The cluster file equivalent to `nodes` nodes of the system (0: its largest
 * partition), as JSON text; DS_ERR_INVALID_ARG for nodes beyond the partition. */
DS_API ds_status_t ds_system_cluster_json(const ds_system_t *system, int64_t nodes, char *text,
                                          size_t size);
/* The cluster of that file (ds_cluster_load_json of it). */
DS_API ds_status_t ds_system_cluster(const ds_system_t *system, int64_t nodes,
                                     ds_cluster_t *cluster);
/* "system=NAME[,nodes=N]": the system's cluster, and the system. */
DS_API ds_status_t ds_system_parse_target(const char *text, ds_cluster_t *cluster,
                                          const ds_system_t **system_p);
/* A site's systems file (every key, unit and default: README.md, "GPU
 * systems"): {"systems": [{"name": ..., ...}]}; an entry with a known name
 * changes the keys it gives, another name adds a system (all of device,
 * gpus_per_node, nics_per_node, nic_Gbps given).  Unknown keys fail the file.
 * Replaces any file loaded before; not thread-safe. */
DS_API ds_status_t ds_systems_load(const char *path);
DS_API ds_status_t ds_systems_load_json(const char *text, size_t size, const char *origin);

/* ---- the running allocation ------------------------------------------------ */

typedef struct ds_allocation {
    int world_size;
    int rank;
    int num_nodes;  /* distinct shared-memory domains */
    int node_index; /* this rank's node, 0..num_nodes-1, ordered by lowest rank */
    int local_rank; /* rank inside the node */
    int local_size; /* ranks on this node */
    int min_local_size, max_local_size;
    char hostname[DS_NAME_MAX];
    /* From Slurm when run inside a job (slurm_job_id 0 otherwise). */
    int64_t slurm_job_id;
    int slurm_nnodes;
    int slurm_ntasks;
    int slurm_gpus_on_node;
    int warnings; /* disagreements between Slurm and MPI found (each logged) */
} ds_allocation_t;

/* Detects the allocation of `comm`: nodes by MPI's shared-memory split (the
 * truth), local ranks, host names, and the Slurm variables, which are
 * cross-checked against MPI.  Collective over comm. */
DS_API ds_status_t ds_allocation_detect(MPI_Comm comm, ds_allocation_t *allocation);

/* Parses SLURM_TASKS_PER_NODE ("4(x2),3" = 4, 4, 3) into at most
 * `max_nodes` counts. */
DS_API ds_status_t ds_slurm_parse_tasks_per_node(const char *text, int *counts, int max_nodes,
                                                 int *num_nodes_p);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_CLUSTER_H */
