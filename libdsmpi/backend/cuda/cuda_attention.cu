// Fused attention (DS_OP_FLASH_ATTENTION) on the CUDA backend: cuDNN's fused
// scaled-dot-product attention, built with cuDNN's graph (backend) API from
// the operations the fused engines recognise: S = Q K^T, the scale, the
// causal mask (row index >= column index, else -inf), the softmax written
// out as max, subtract, exp, sum, divide with its statistics (max + log
// sum, the log-sum-exp the backward reads), O = P V.  Layouts as the cpu
// backend's (cpu/cpu_attention.c): q, o [batch, heads, seq_q, head_dim];
// k, v [batch, kv_heads, seq_k, head_dim]; lse [batch, heads, seq_q] fp32.
//
// cuDNN is opened with dlopen on first use, so the module loads where cuDNN
// is missing; there, and in builds without cuDNN's headers, the key is
// refused with the reason.  The backward pass is not built: refused.
#include "dsi_cuda_impl.h"

#include <stdlib.h>
#include <string.h>

#ifdef DSMPI_HAVE_CUDNN
#include <cudnn.h>

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>

namespace
{

// The few entry points used, from libcudnn.so.9.
struct cudnn_api {
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*create_descriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_descriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set_attribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                   cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*get_attribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                   cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    const char *(*error_string)(cudnnStatus_t);
    size_t (*version)(void);
};

cudnn_api api;
char api_error[256];
pthread_once_t api_once = PTHREAD_ONCE_INIT;

template <typename F> bool bind(void *lib, const char *name, F *fn)
{
    void *symbol = dlsym(lib, name);
    memcpy(fn, &symbol, sizeof(*fn));
    return symbol != nullptr;
}

void load_api(void)
{
    void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        snprintf(api_error, sizeof(api_error), "cuDNN 9 cannot be loaded: %s", dlerror());
        return;
    }
    bool ok = bind(lib, "cudnnCreate", &api.create) && bind(lib, "cudnnDestroy", &api.destroy) &&
              bind(lib, "cudnnSetStream", &api.set_stream) &&
              bind(lib, "cudnnBackendCreateDescriptor", &api.create_descriptor) &&
              bind(lib, "cudnnBackendDestroyDescriptor", &api.destroy_descriptor) &&
              bind(lib, "cudnnBackendSetAttribute", &api.set_attribute) &&
              bind(lib, "cudnnBackendGetAttribute", &api.get_attribute) &&
              bind(lib, "cudnnBackendFinalize", &api.finalize) &&
              bind(lib, "cudnnBackendExecute", &api.execute) &&
              bind(lib, "cudnnGetErrorString", &api.error_string) &&
              bind(lib, "cudnnGetVersion", &api.version);
    if (!ok) {
        snprintf(api_error, sizeof(api_error), "libcudnn.so.9 lacks the graph API (%s)", dlerror());
        memset(&api, 0, sizeof(api));
    }
}

int api_ready(void)
{
    pthread_once(&api_once, load_api);
    if (api.create == nullptr)
        return dsc_fail(DS_ERR_UNSUPPORTED,
                        "flash_attention keys need cuDNN's fused attention: %s (profile with "
                        "flash=off, or on the cpu backend)",
                        api_error);
    return DS_OK;
}

enum { MAX_DESCRIPTORS = 96, MAX_OPS = 32, MAX_CONFIGS = 8 };

// Tensors the variant pack names by these ids.
enum uid { UID_Q = 1, UID_K, UID_V, UID_O, UID_LSE, UID_SCALE, UID_NEG_INF, UID_FIRST_VIRTUAL };

// A graph under construction: every descriptor made is kept for release; the
// first failure is kept and later calls do nothing.
struct graph {
    cudnnBackendDescriptor_t owned[MAX_DESCRIPTORS];
    int num_owned;
    cudnnBackendDescriptor_t ops[MAX_OPS];
    int num_ops;
    int64_t next_uid;
    int status;
    const char *failed_at;
    cudnnStatus_t failed_with;
};

void record(graph *g, cudnnStatus_t s, const char *what)
{
    if (s != CUDNN_STATUS_SUCCESS && g->status == DS_OK) {
        g->status = DS_ERR_UNSUPPORTED;
        g->failed_at = what;
        g->failed_with = s;
    }
}

cudnnBackendDescriptor_t make(graph *g, cudnnBackendDescriptorType_t type)
{
    cudnnBackendDescriptor_t d = nullptr;
    if (g->status != DS_OK)
        return nullptr;
    if (g->num_owned == MAX_DESCRIPTORS) {
        g->status = DS_ERR_INTERNAL;
        g->failed_at = "too many cuDNN descriptors";
        return nullptr;
    }
    record(g, api.create_descriptor(type, &d), "creating a descriptor");
    if (d != nullptr)
        g->owned[g->num_owned++] = d;
    return d;
}

void set(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
         cudnnBackendAttributeType_t type, int64_t count, const void *value, const char *what)
{
    if (g->status == DS_OK)
        record(g, api.set_attribute(d, name, type, count, value), what);
}

void finalize(graph *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->status == DS_OK)
        record(g, api.finalize(d), what);
}

void set_desc(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
              cudnnBackendDescriptor_t value, const char *what)
{
    set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

// A 4-d tensor; strides nullptr = packed.  Virtual tensors get fresh ids.
cudnnBackendDescriptor_t tensor(graph *g, int64_t uid, cudnnDataType_t type, const int64_t dims[4],
                                const int64_t *strides, bool is_virtual, bool by_value = false)
{
    int64_t packed[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
    int64_t id = is_virtual ? g->next_uid++ : uid;
    int64_t alignment = by_value ? 4 : 16;
    cudnnBackendDescriptor_t t = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides ? strides : packed,
        "tensor strides");
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor id");
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor align");
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value)
        set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value,
            "tensor by value");
    finalize(g, t, "a tensor");
    return t;
}

void add_op(graph *g, cudnnBackendDescriptor_t op)
{
    if (g->status != DS_OK)
        return;
    if (g->num_ops == MAX_OPS) {
        g->status = DS_ERR_INTERNAL;
        g->failed_at = "too many cuDNN operations";
        return;
    }
    g->ops[g->num_ops++] = op;
}

// y = mode(x[, b[, t]]); axis >= 0 for GEN_INDEX.
void pointwise(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t math,
               cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
               cudnnBackendDescriptor_t y, int64_t axis = -1)
{
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "pointwise math");
    if (axis >= 0)
        set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
    finalize(g, pw, "a pointwise descriptor");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise op");
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b != nullptr)
        set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
    if (t != nullptr)
        set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    finalize(g, op, "a pointwise operation");
    add_op(g, op);
}

void reduction(graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t y)
{
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode,
        "reduction mode");
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, "reduction math");
    finalize(g, r, "a reduction descriptor");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction op");
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    finalize(g, op, "a reduction operation");
    add_op(g, op);
}

void matmul(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
            cudnnBackendDescriptor_t c)
{
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, "matmul math");
    finalize(g, m, "a matmul descriptor");
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, "matmul op");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    finalize(g, op, "a matmul operation");
    add_op(g, op);
}

// The forward graph of `a` in `type` (bf16 or fp16).
void forward_graph(graph *g, const ds_attention_shape_t *a, cudnnDataType_t type, bool causal)
{
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    int64_t b = a->batch, h = a->heads, hk = a->kv_heads, sq = a->seq_q, sk = a->seq_k,
            d = a->head_dim;
    int64_t q_dims[4] = {b, h, sq, d}, kt_dims[4] = {b, hk, d, sk}, v_dims[4] = {b, hk, sk, d};
    // K stored [b, hk, sk, d] read as K^T [b, hk, d, sk].
    int64_t kt_strides[4] = {hk * sk * d, sk * d, 1, d};
    int64_t s_dims[4] = {b, h, sq, sk}, row_dims[4] = {b, h, sq, 1}, one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, type, q_dims, nullptr, false);
    cudnnBackendDescriptor_t kt = tensor(g, UID_K, type, kt_dims, kt_strides, false);
    cudnnBackendDescriptor_t v = tensor(g, UID_V, type, v_dims, nullptr, false);
    cudnnBackendDescriptor_t o = tensor(g, UID_O, type, q_dims, nullptr, false);
    cudnnBackendDescriptor_t lse = tensor(g, UID_LSE, f32, row_dims, nullptr, false);
    cudnnBackendDescriptor_t scale = tensor(g, UID_SCALE, f32, one, nullptr, false, true);
    cudnnBackendDescriptor_t s = tensor(g, 0, f32, s_dims, nullptr, true);
    matmul(g, q, kt, s);
    cudnnBackendDescriptor_t scaled = tensor(g, 0, f32, s_dims, nullptr, true);
    pointwise(g, CUDNN_POINTWISE_MUL, f32, s, scale, nullptr, scaled);
    if (causal) {
        cudnnBackendDescriptor_t row = tensor(g, 0, CUDNN_DATA_INT32, s_dims, nullptr, true);
        cudnnBackendDescriptor_t col = tensor(g, 0, CUDNN_DATA_INT32, s_dims, nullptr, true);
        cudnnBackendDescriptor_t keep = tensor(g, 0, CUDNN_DATA_BOOLEAN, s_dims, nullptr, true);
        cudnnBackendDescriptor_t neg_inf = tensor(g, UID_NEG_INF, f32, one, nullptr, false, true);
        cudnnBackendDescriptor_t masked = tensor(g, 0, f32, s_dims, nullptr, true);
        pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, scaled, nullptr, nullptr, row, 2);
        pointwise(g, CUDNN_POINTWISE_GEN_INDEX, f32, scaled, nullptr, nullptr, col, 3);
        pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr, keep);
        pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, f32, scaled, neg_inf, keep, masked);
        scaled = masked;
    }
    cudnnBackendDescriptor_t max = tensor(g, 0, f32, row_dims, nullptr, true);
    cudnnBackendDescriptor_t shifted = tensor(g, 0, f32, s_dims, nullptr, true);
    cudnnBackendDescriptor_t e = tensor(g, 0, f32, s_dims, nullptr, true);
    cudnnBackendDescriptor_t sum = tensor(g, 0, f32, row_dims, nullptr, true);
    cudnnBackendDescriptor_t log_sum = tensor(g, 0, f32, row_dims, nullptr, true);
    cudnnBackendDescriptor_t p = tensor(g, 0, f32, s_dims, nullptr, true);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, scaled, max);
    pointwise(g, CUDNN_POINTWISE_SUB, f32, scaled, max, nullptr, shifted);
    pointwise(g, CUDNN_POINTWISE_EXP, f32, shifted, nullptr, nullptr, e);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    pointwise(g, CUDNN_POINTWISE_LOG, f32, sum, nullptr, nullptr, log_sum);
    pointwise(g, CUDNN_POINTWISE_ADD, f32, max, log_sum, nullptr, lse);
    pointwise(g, CUDNN_POINTWISE_DIV, f32, e, sum, nullptr, p);
    matmul(g, p, v, o);
}

} // namespace

struct dsc_attention {
    cudnnHandle_t handle;
    graph g;
    cudnnBackendDescriptor_t plan;
    void *workspace;
    int64_t workspace_bytes;
    bool causal;
    float scale, neg_inf;
};

void dsc_attention_release(void *handle)
{
    dsc_attention *at = static_cast<dsc_attention *>(handle);
    if (at == nullptr)
        return;
    for (int i = at->g.num_owned - 1; i >= 0; i--)
        api.destroy_descriptor(at->g.owned[i]);
    if (at->handle != nullptr)
        api.destroy(at->handle);
    if (at->workspace != nullptr)
        cudaFree(at->workspace);
    free(at);
}

// The first engine configuration cuDNN's heuristics give that makes a plan.
static void make_plan(dsc_attention *at)
{
    graph *g = &at->g;
    cudnnBackendDescriptor_t op_graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, op_graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->num_ops,
        g->ops, "graph ops");
    set(g, op_graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &at->handle,
        "graph handle");
    finalize(g, op_graph, "the operation graph");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    cudnnBackendDescriptor_t heuristics = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set_desc(g, heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph, "heuristics graph");
    set(g, heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode,
        "heuristics mode");
    finalize(g, heuristics, "the heuristics");
    cudnnBackendDescriptor_t configs[MAX_CONFIGS];
    for (int i = 0; i < MAX_CONFIGS; i++)
        configs[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t count = 0;
    if (g->status == DS_OK)
        record(g,
               api.get_attribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_CONFIGS, &count, configs),
               "the heuristics' results");
    for (int64_t i = 0; i < count && g->status == DS_OK && at->plan == nullptr; i++) {
        cudnnBackendDescriptor_t plan = make(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &at->handle,
            "plan handle");
        set_desc(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i], "plan config");
        if (g->status == DS_OK && api.finalize(plan) == CUDNN_STATUS_SUCCESS)
            at->plan = plan; // engines that cannot run this graph fail here: try the next
    }
    if (g->status == DS_OK && at->plan == nullptr) {
        g->status = DS_ERR_UNSUPPORTED;
        g->failed_at = count > 0 ? "every engine the heuristics offered" : "the heuristics";
        g->failed_with = CUDNN_STATUS_NOT_SUPPORTED;
    }
    int64_t got = 0;
    if (g->status == DS_OK)
        record(g,
               api.get_attribute(at->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &got, &at->workspace_bytes),
               "the plan's workspace size");
}

int dsc_attention_prepare(const ds_event_key_t *key, cudaStream_t stream, void **attention_p)
{
    DSC_TRY(api_ready());
    if (key->pass == DS_PASS_BACKWARD)
        return dsc_fail(DS_ERR_UNSUPPORTED,
                        "the cuda backend runs the fused attention's forward (cuDNN) but not its "
                        "backward yet; profile with flash=off, or on the cpu backend");
    if (key->dtype != DS_DTYPE_BF16 && key->dtype != DS_DTYPE_FP16)
        return dsc_fail(DS_ERR_UNSUPPORTED,
                        "cuDNN's fused attention runs bf16 and fp16 (accepted: those dtypes)");
    ds_attention_shape_t shape = ds_attention_shape_of(key);
    dsc_attention *at = static_cast<dsc_attention *>(calloc(1, sizeof(dsc_attention)));
    if (at == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for an attention graph");
    at->g.next_uid = UID_FIRST_VIRTUAL;
    at->causal = (key->variant & 1) != 0;
    at->scale = 1.0f / sqrtf((float)shape.head_dim);
    at->neg_inf = -INFINITY;
    int status = DS_OK;
    cudnnStatus_t s = api.create(&at->handle);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.set_stream(at->handle, stream);
    if (s != CUDNN_STATUS_SUCCESS) {
        status = dsc_fail(DS_ERR_CUDA, "cuDNN handle: %s", api.error_string(s));
        dsc_attention_release(at);
        return status;
    }
    forward_graph(&at->g, &shape,
                  key->dtype == DS_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF, at->causal);
    make_plan(at);
    if (at->g.status == DS_OK && at->workspace_bytes > 0 &&
        cudaMalloc(&at->workspace, (size_t)at->workspace_bytes) != cudaSuccess) {
        at->g.status = DS_ERR_NO_MEMORY;
        at->g.failed_at = "the plan's workspace";
        at->g.failed_with = CUDNN_STATUS_ALLOC_FAILED;
    }
    if (at->g.status != DS_OK) {
        status = dsc_fail(at->g.status,
                          "cuDNN %zu has no fused attention for this key: %s failed (%s); profile "
                          "with flash=off, or on the cpu backend",
                          api.version(), at->g.failed_at, api.error_string(at->g.failed_with));
        dsc_attention_release(at);
        return status;
    }
    *attention_p = at;
    return DS_OK;
}

int dsc_attention_run(void *handle, const void *q, const void *k, const void *v, void *o, void *lse)
{
    dsc_attention *at = static_cast<dsc_attention *>(handle);
    int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_LSE, UID_SCALE, UID_NEG_INF};
    void *pointers[7] = {
        const_cast<void *>(q), const_cast<void *>(k), const_cast<void *>(v), o, lse, &at->scale,
        &at->neg_inf};
    int64_t n = at->causal ? 7 : 6;
    cudnnBackendDescriptor_t pack = nullptr;
    cudnnStatus_t s = api.create_descriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                              pointers);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.set_attribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                              &at->workspace);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.finalize(pack);
    if (s == CUDNN_STATUS_SUCCESS)
        s = api.execute(at->handle, at->plan, pack);
    if (pack != nullptr)
        api.destroy_descriptor(pack);
    if (s != CUDNN_STATUS_SUCCESS)
        return dsc_fail(DS_ERR_CUDA, "cuDNN fused attention: %s", api.error_string(s));
    return DS_OK;
}

#else // built without cuDNN's headers

int dsc_attention_prepare(const ds_event_key_t *key, cudaStream_t stream, void **attention_p)
{
    return dsc_fail(DS_ERR_UNSUPPORTED,
                    "this build's cuda backend has no fused attention (cuDNN's headers were not "
                    "found when it was configured); profile with flash=off, or on the cpu "
                    "backend");
}

int dsc_attention_run(void *handle, const void *q, const void *k, const void *v, void *o, void *lse)
{
    return dsc_fail(DS_ERR_INTERNAL, "no fused attention in this build");
}

void dsc_attention_release(void *handle)
{
}

#endif
