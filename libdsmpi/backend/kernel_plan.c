/* The buffers of every compute operator (see dsi_kernel_plan.h). */
#include "dsi_kernel_plan.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#define MAX_ELEMENTS ((int64_t)1 << 40)

static int add(dsi_kernel_plan_t *plan, int64_t count, dsi_elem_t elem, dsi_fill_t fill,
               float scale)
{
    dsi_buffer_plan_t *b = &plan->buffers[plan->num_buffers];
    b->count = count;
    b->elem = elem;
    b->fill = fill;
    b->scale = scale;
    b->limit = 0;
    return plan->num_buffers++;
}

static int stored(dsi_kernel_plan_t *plan, int64_t count, dsi_fill_t fill, float scale)
{
    return add(plan, count, DSI_ELEM_STORED, fill, scale);
}

static int fp32(dsi_kernel_plan_t *plan, int64_t count, dsi_fill_t fill, float scale)
{
    return add(plan, count, DSI_ELEM_F32, fill, scale);
}

static int indices(dsi_kernel_plan_t *plan, int64_t count, int64_t limit)
{
    int i = add(plan, count, DSI_ELEM_I32, DSI_FILL_INDEX, 0.0f);
    plan->buffers[i].limit = limit;
    return i;
}

static int fail(char *message, size_t size, const ds_event_key_t *key, const char *why)
{
    snprintf(message, size, "compute event (operator %u, dims %lld %lld %lld %lld): %s",
             (unsigned)key->op, (long long)key->dims[0], (long long)key->dims[1],
             (long long)key->dims[2], (long long)key->dims[3], why);
    return DS_ERR_INVALID_ARG;
}

/* rows x cols, positive and not absurd. */
static int elements(int64_t rows, int64_t cols, int64_t *count)
{
    if (rows < 1 || cols < 1 || rows > MAX_ELEMENTS || cols > MAX_ELEMENTS)
        return 0;
    if (rows > MAX_ELEMENTS / cols)
        return 0;
    *count = rows * cols;
    return 1;
}

int64_t dsi_rope_head_dim(int64_t cols)
{
    for (int64_t d = 128; d >= 2; d /= 2)
        if (cols % d == 0)
            return d;
    return 0;
}

int dsi_kernel_plan_make(const ds_event_key_t *key, dsi_kernel_plan_t *plan, char *message,
                         size_t message_size)
{
    memset(plan, 0, sizeof(*plan));
    plan->in_index = plan->out_index = -1;
    const int64_t *d = key->dims;
    int bwd = key->pass == DS_PASS_BACKWARD;
    plan->backward = bwd;
    plan->rows = d[0];
    plan->cols = d[1];
    int64_t n = 0;
    float in_scale = bwd ? DSI_GRAD_STD : 1.0f;

    switch ((ds_op_t)key->op) {
    case DS_OP_GEMM:
    case DS_OP_BATCHED_GEMM: {
        int64_t batch = key->op == DS_OP_GEMM ? 1 : d[3], mk, kn, mn;
        if (d[0] < 1 || d[1] < 1 || d[2] < 1 || batch < 1)
            return fail(message, message_size, key, "m, n, k and batch must be positive");
        if (d[0] > INT_MAX || d[1] > INT_MAX || d[2] > INT_MAX || batch > INT_MAX)
            return fail(message, message_size, key, "m, n, k and batch must fit 32-bit integers");
        if ((key->variant & ~(unsigned)(DS_GEMM_TRANS_A | DS_GEMM_TRANS_B)) != 0)
            return fail(message, message_size, key, "unknown transposition bits");
        if (!elements(d[0], d[2], &mk) || !elements(mk, batch, &mk) || !elements(d[2], d[1], &kn) ||
            !elements(kn, batch, &kn) || !elements(d[0], d[1], &mn) || !elements(mn, batch, &mn))
            return fail(message, message_size, key, "too many elements");
        /* Forward: activations x weights; backward data: gradients x weights;
         * backward weight (A transposed): gradients x activations. */
        float b_scale = bwd && (key->variant & DS_GEMM_TRANS_A) ? 1.0f : DSI_WEIGHT_STD;
        plan->in_index = stored(plan, mk, DSI_FILL_NORMAL, in_scale);
        stored(plan, kn, DSI_FILL_NORMAL, b_scale);
        plan->out_index = stored(plan, mn, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    }
    case DS_OP_SOFTMAX:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->causal = key->variant & 1;
        plan->in_index =
            stored(plan, n, DSI_FILL_NORMAL, bwd ? DSI_GRAD_STD : 1.0f / DSI_SOFTMAX_SCALE);
        if (bwd) /* random scores, made probabilities at prepare */
            stored(plan, n, DSI_FILL_NORMAL, 1.0f / DSI_SOFTMAX_SCALE);
        plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_LAYERNORM:
    case DS_OP_RMSNORM: {
        int layer = key->op == DS_OP_LAYERNORM;
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        if (!bwd) {
            stored(plan, d[1], DSI_FILL_ONE_NORMAL, DSI_WEIGHT_STD);
            if (layer)
                stored(plan, d[1], DSI_FILL_NORMAL, DSI_WEIGHT_STD);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
            if (layer)
                fp32(plan, d[0], DSI_FILL_NONE, 0.0f);
            fp32(plan, d[0], DSI_FILL_NONE, 0.0f);
        } else {
            stored(plan, n, DSI_FILL_NORMAL, 1.0f);
            stored(plan, d[1], DSI_FILL_ONE_NORMAL, DSI_WEIGHT_STD);
            if (layer)
                fp32(plan, d[0], DSI_FILL_SAVED, 0.0f);
            fp32(plan, d[0], DSI_FILL_SAVED, 0.0f);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
            fp32(plan, d[1], DSI_FILL_NONE, 0.0f);
            if (layer)
                fp32(plan, d[1], DSI_FILL_NONE, 0.0f);
        }
        return DS_OK;
    }
    case DS_OP_GELU:
    case DS_OP_RELU:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        if (bwd)
            stored(plan, n, DSI_FILL_NORMAL, 1.0f);
        plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_SWIGLU:
    case DS_OP_GEGLU:
        if (!elements(d[0], d[1], &n) || !elements(n, 2, &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, bwd ? n / 2 : n, DSI_FILL_NORMAL, in_scale);
        if (bwd)
            stored(plan, n, DSI_FILL_NORMAL, 1.0f);
        plan->out_index = stored(plan, bwd ? n : n / 2, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_DROPOUT:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        if (bwd)
            add(plan, n, DSI_ELEM_U8, DSI_FILL_SAVED, 0.0f);
        plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        if (!bwd)
            add(plan, n, DSI_ELEM_U8, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_DROPOUT_ADD:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        if (!bwd) {
            stored(plan, d[1], DSI_FILL_NORMAL, DSI_WEIGHT_STD);
            stored(plan, n, DSI_FILL_NORMAL, 1.0f);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
            add(plan, n, DSI_ELEM_U8, DSI_FILL_NONE, 0.0f);
        } else {
            add(plan, n, DSI_ELEM_U8, DSI_FILL_SAVED, 0.0f);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
            fp32(plan, d[1], DSI_FILL_NONE, 0.0f);
        }
        return DS_OK;
    case DS_OP_ADD:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        stored(plan, n, DSI_FILL_NORMAL, in_scale);
        plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_ROPE:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->head_dim = dsi_rope_head_dim(d[1]);
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        fp32(plan, d[0] * plan->head_dim, DSI_FILL_SAVED, 0.0f); /* cos then sin */
        return DS_OK;
    case DS_OP_EMBEDDING: {
        int64_t table = 0;
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "tokens and hidden must be positive");
        if (d[2] < 1 || d[2] > INT32_MAX || !elements(d[2], d[1], &table))
            return fail(message, message_size, key,
                        "the vocabulary (dims[2]) must be in 1..2^31-1");
        if (!bwd) {
            indices(plan, d[0], d[2]);
            stored(plan, table, DSI_FILL_NORMAL, DSI_WEIGHT_STD);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        } else {
            plan->in_index = stored(plan, n, DSI_FILL_NORMAL, DSI_GRAD_STD);
            indices(plan, d[0], d[2]);
            fp32(plan, table, DSI_FILL_NONE, 0.0f); /* zeroed, like training's gradient buffer */
        }
        return DS_OK;
    }
    case DS_OP_CROSS_ENTROPY:
        if (!elements(d[0], d[1], &n) || d[1] > INT32_MAX)
            return fail(message, message_size, key,
                        "tokens and vocabulary must be positive (vocabulary below 2^31)");
        if (!bwd) {
            plan->in_index = stored(plan, n, DSI_FILL_NORMAL, 2.0f);
            indices(plan, d[0], d[1]);
            fp32(plan, n, DSI_FILL_NONE, 0.0f); /* softmax, kept for the backward */
            fp32(plan, d[0], DSI_FILL_NONE, 0.0f);
        } else {
            fp32(plan, n, DSI_FILL_NORMAL, 2.0f); /* random logits, made a softmax at prepare */
            indices(plan, d[0], d[1]);
            fp32(plan, d[0], DSI_FILL_CONSTANT, 1.0f / (float)d[0]);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        }
        return DS_OK;
    case DS_OP_OPTIMIZER:
        if (d[0] < 1 || d[0] > MAX_ELEMENTS)
            return fail(message, message_size, key, "the parameter count must be positive");
        plan->rows = d[0];
        plan->cols = 1;
        fp32(plan, d[0], DSI_FILL_NORMAL, DSI_WEIGHT_STD);
        fp32(plan, d[0], DSI_FILL_NORMAL, 1e-3f);
        fp32(plan, d[0], DSI_FILL_POSITIVE, 1e-6f);
        fp32(plan, d[0], DSI_FILL_NORMAL, 1e-3f);
        add(plan, d[0], DSI_ELEM_BF16, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_POOL:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        if (bwd)
            add(plan, n, DSI_ELEM_I8, DSI_FILL_SAVED, 0.0f);
        plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        if (!bwd)
            add(plan, n, DSI_ELEM_I8, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_FLASH_ATTENTION: {
        ds_attention_shape_t a = ds_attention_shape_of(key);
        int64_t bh, bkv, nq, nkv;
        if (a.batch < 1 || a.heads < 1 || a.kv_heads < 1 || a.seq_q < 1 || a.seq_k < 1 ||
            a.head_dim < 1 || a.head_dim > 1024)
            return fail(message, message_size, key,
                        "batch, heads, kv-heads, seq, kv-seq must be positive and head-dim in "
                        "1..1024");
        if (a.heads % a.kv_heads != 0)
            return fail(message, message_size, key, "heads must be a multiple of kv-heads");
        if (!elements(a.batch, a.heads, &bh) || !elements(bh, a.seq_q, &bh) ||
            !elements(bh, a.head_dim, &nq) || !elements(a.batch, a.kv_heads, &bkv) ||
            !elements(bkv, a.seq_k, &bkv) || !elements(bkv, a.head_dim, &nkv))
            return fail(message, message_size, key, "too many elements");
        plan->causal = key->variant & 1;
        plan->rows = bh; /* queries of every head */
        plan->cols = a.head_dim;
        if (!bwd) {
            plan->in_index = stored(plan, nq, DSI_FILL_NORMAL, 1.0f);
            stored(plan, nkv, DSI_FILL_NORMAL, 1.0f);
            stored(plan, nkv, DSI_FILL_NORMAL, 1.0f);
            plan->out_index = stored(plan, nq, DSI_FILL_NONE, 0.0f);
            fp32(plan, plan->rows, DSI_FILL_NONE, 0.0f); /* log-sum-exp per query */
        } else {
            plan->in_index = stored(plan, nq, DSI_FILL_NORMAL, DSI_GRAD_STD);
            stored(plan, nq, DSI_FILL_NORMAL, 1.0f);
            stored(plan, nkv, DSI_FILL_NORMAL, 1.0f);
            stored(plan, nkv, DSI_FILL_NORMAL, 1.0f);
            stored(plan, nq, DSI_FILL_SAVED, 0.0f);       /* output of the forward */
            fp32(plan, plan->rows, DSI_FILL_SAVED, 0.0f); /* its log-sum-exp */
            plan->out_index = stored(plan, nq, DSI_FILL_NONE, 0.0f);
            stored(plan, nkv, DSI_FILL_NONE, 0.0f);
            stored(plan, nkv, DSI_FILL_NONE, 0.0f);
        }
        return DS_OK;
    }
    case DS_OP_FP8_CAST:
        if (!elements(d[0], d[1], &n))
            return fail(message, message_size, key, "rows and cols must be positive");
        plan->in_index = stored(plan, n, DSI_FILL_NORMAL, in_scale);
        add(plan, n, DSI_ELEM_U8, DSI_FILL_NONE, 0.0f);
        fp32(plan, 1, DSI_FILL_NONE, 0.0f);
        return DS_OK;
    case DS_OP_MOE_AUX_LOSS:
        if (!elements(d[0], d[1], &n) || d[1] > INT32_MAX)
            return fail(message, message_size, key, "rows and experts must be positive");
        if (!bwd) { /* probabilities, routing map -> per-expert sums, token counts, loss */
            plan->in_index = stored(plan, n, DSI_FILL_NORMAL, 1.0f);
            add(plan, n, DSI_ELEM_U8, DSI_FILL_NONE, 0.0f);
            plan->out_index = fp32(plan, d[1], DSI_FILL_NONE, 0.0f);
            fp32(plan, d[1], DSI_FILL_NONE, 0.0f);
            fp32(plan, 1, DSI_FILL_NONE, 0.0f);
        } else { /* token counts (fp32, not chained) -> the probabilities' gradient */
            fp32(plan, d[1], DSI_FILL_POSITIVE, 1.0f);
            plan->out_index = stored(plan, n, DSI_FILL_NONE, 0.0f);
        }
        return DS_OK;
    case DS_OP_FRAMEWORK_GAP:
    case DS_OP_COUNT_: break;
    }
    return fail(message, message_size, key, "unknown operator");
}

size_t dsi_kernel_plan_buffer_bytes(const dsi_buffer_plan_t *buffer, size_t stored_size)
{
    static const size_t sizes[] = {0, 4, 2, 4, 1, 1};
    size_t element = buffer->elem == DSI_ELEM_STORED ? stored_size : sizes[buffer->elem];
    return (size_t)buffer->count * element;
}

size_t dsi_kernel_plan_bytes(const dsi_kernel_plan_t *plan, size_t stored_size)
{
    size_t total = 0;
    for (int i = 0; i < plan->num_buffers; i++)
        total += dsi_kernel_plan_buffer_bytes(&plan->buffers[i], stored_size);
    return total;
}

uint64_t dsi_kernel_plan_seed(const ds_event_key_t *key, int index)
{
    /* FNV-1a over the key's bytes (keys have no padding), then the index. */
    const unsigned char *bytes = (const unsigned char *)key;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < sizeof(*key); i++)
        h = (h ^ bytes[i]) * 0x100000001b3ULL;
    return h ^ ((uint64_t)index + 1) * 0x632be59bd9b4e019ULL;
}
