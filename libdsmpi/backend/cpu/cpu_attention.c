/*
 * Fused attention on the CPU, the work FlashAttention-2 does on a GPU: the
 * scores of a block of queries against a block of keys live only in a tile,
 * the softmax is accumulated online (running maximum and sum per query), and
 * the backward recomputes the tiles from the saved log-sum-exp instead of
 * reading stored probabilities.  Tiles are multiplied with BLAS in fp32 on
 * operands loaded from the stored type, as the other kernels do.
 *
 * Layouts: q, o, dq, do [batch, heads, seq_q, head_dim]; k, v, dk, dv
 * [batch, kv_heads, seq_k, head_dim]; lse [batch, heads, seq_q] in fp32.
 * Query head h reads key/value head h / (heads / kv_heads).
 */
#include "dsi_cpu.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

enum { TILE = 64 }; /* queries and keys per tile: a 16 KiB score tile stays in L1/L2 */

/* Last key query i may see (exclusive bound), causal or not. */
static int64_t key_end(const ds_attention_shape_t *sh, int causal, int64_t i)
{
    if (!causal)
        return sh->seq_k;
    int64_t end = i + 1 + (sh->seq_k - sh->seq_q);
    return end < 0 ? 0 : end > sh->seq_k ? sh->seq_k : end;
}

int64_t dsi_cpu_attention_scratch(const ds_attention_shape_t *sh, int backward)
{
    int64_t d = sh->head_dim;
    if (!backward) /* Q, O accumulator; K, V; scores; max, sum */
        return 2 * TILE * d + 2 * TILE * d + TILE * TILE + 2 * TILE;
    /* Q, dO, O, dQ accumulator; K, V; P, dP; lse, D; dK and dV of one KV head */
    return 4 * TILE * d + 2 * TILE * d + 2 * TILE * TILE + 2 * TILE + 2 * sh->seq_k * d;
}

/* scores[r][c] = scale * q_r . k_c for rows of the tile, masked to -inf. */
static void tile_scores(const ds_attention_shape_t *sh, int causal, float scale, int64_t i0,
                        int64_t rows, int64_t j0, int64_t cols, const float *q, const float *k,
                        float *s)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)sh->head_dim,
                scale, q, (int)sh->head_dim, k, (int)sh->head_dim, 0.0f, s, (int)cols);
    if (!causal)
        return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = key_end(sh, causal, i0 + r) - j0; c < cols; c++)
            if (c >= 0)
                s[r * cols + c] = -INFINITY;
}

/* Keys and values j0..j0+cols of one KV head into kt and vt, and the
 * scores of the query tile qt against them into s. */
static void key_tile(dsi_stype_t type, const ds_attention_shape_t *sh, int causal, const void *k,
                     const void *v, int64_t kv_base, int64_t i0, int64_t rows, int64_t j0,
                     int64_t cols, const float *qt, float *kt, float *vt, float *s)
{
    const int64_t d = sh->head_dim;
    dsi_cpu_load(k, type, kv_base + j0 * d, cols * d, kt);
    dsi_cpu_load(v, type, kv_base + j0 * d, cols * d, vt);
    tile_scores(sh, causal, 1.0f / sqrtf((float)d), i0, rows, j0, cols, qt, kt, s);
}

void dsi_cpu_attention_fwd(dsi_stype_t type, const ds_attention_shape_t *sh, int causal,
                           const void *q, const void *k, const void *v, void *o, float *lse,
                           float *scratch)
{
    const int64_t d = sh->head_dim, group = sh->heads / sh->kv_heads;
    float *qt = scratch, *acc = qt + TILE * d, *kt = acc + TILE * d, *vt = kt + TILE * d;
    float *s = vt + TILE * d, *max = s + TILE * TILE, *sum = max + TILE;
    for (int64_t bh = 0; bh < sh->batch * sh->heads; bh++) {
        int64_t kvh = (bh / sh->heads) * sh->kv_heads + (bh % sh->heads) / group;
        int64_t q_base = bh * sh->seq_q * d, kv_base = kvh * sh->seq_k * d;
        for (int64_t i0 = 0; i0 < sh->seq_q; i0 += TILE) {
            int64_t rows = sh->seq_q - i0 < TILE ? sh->seq_q - i0 : TILE;
            dsi_cpu_load(q, type, q_base + i0 * d, rows * d, qt);
            memset(acc, 0, (size_t)(rows * d) * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                max[r] = -INFINITY;
                sum[r] = 0.0f;
            }
            int64_t j_end = key_end(sh, causal, i0 + rows - 1);
            for (int64_t j0 = 0; j0 < j_end; j0 += TILE) {
                int64_t cols = j_end - j0 < TILE ? j_end - j0 : TILE;
                key_tile(type, sh, causal, k, v, kv_base, i0, rows, j0, cols, qt, kt, vt, s);
                for (int64_t r = 0; r < rows; r++) {
                    float *row = s + r * cols, m = max[r];
                    for (int64_t c = 0; c < cols; c++)
                        m = row[c] > m ? row[c] : m;
                    if (m == -INFINITY) /* no key of this tile is visible yet */
                        continue;
                    float rescale = expf(max[r] - m), total = 0.0f;
                    for (int64_t c = 0; c < cols; c++) {
                        row[c] = expf(row[c] - m);
                        total += row[c];
                    }
                    for (int64_t e = 0; e < d; e++)
                        acc[r * d + e] *= rescale;
                    sum[r] = sum[r] * rescale + total;
                    max[r] = m;
                }
                /* Fully masked rows are all zero after expf(-inf - m). */
                for (int64_t r = 0; r < rows; r++)
                    if (max[r] == -INFINITY)
                        memset(s + r * cols, 0, (size_t)cols * sizeof(float));
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)d, (int)cols,
                            1.0f, s, (int)cols, vt, (int)d, 1.0f, acc, (int)d);
            }
            for (int64_t r = 0; r < rows; r++) {
                float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
                for (int64_t e = 0; e < d; e++)
                    acc[r * d + e] *= inv;
                lse[bh * sh->seq_q + i0 + r] = sum[r] > 0.0f ? max[r] + logf(sum[r]) : INFINITY;
            }
            dsi_cpu_store(o, type, q_base + i0 * d, rows * d, acc);
        }
    }
}

/* One query tile of one head against every key tile it sees: dQ of the tile,
 * and its share of the KV head's dK and dV (fp32 accumulators). */
static void backward_tile(dsi_stype_t type, const ds_attention_shape_t *sh, int causal, int64_t i0,
                          int64_t rows, int64_t kv_base, const void *k, const void *v,
                          float *scratch, float *dk_acc, float *dv_acc)
{
    const int64_t d = sh->head_dim;
    const float scale = 1.0f / sqrtf((float)d);
    float *qt = scratch, *dot = qt + TILE * d, *ot = dot + TILE * d, *dq = ot + TILE * d;
    float *kt = dq + TILE * d, *vt = kt + TILE * d, *p = vt + TILE * d, *dp = p + TILE * TILE;
    float *lse = dp + TILE * TILE, *delta = lse + TILE;
    int64_t j_end = key_end(sh, causal, i0 + rows - 1);
    for (int64_t j0 = 0; j0 < j_end; j0 += TILE) {
        int64_t cols = j_end - j0 < TILE ? j_end - j0 : TILE;
        key_tile(type, sh, causal, k, v, kv_base, i0, rows, j0, cols, qt, kt, vt, p);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                p[r * cols + c] = expf(p[r * cols + c] - lse[r]); /* exp(-inf) = 0 */
        /* dV += P^T dO; dP = dO V^T; dS = P (dP - D); dQ += dS K; dK += dS^T Q */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)cols, (int)d, (int)rows, 1.0f, p,
                    (int)cols, dot, (int)d, 1.0f, dv_acc + j0 * d, (int)d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)cols, (int)d, 1.0f,
                    dot, (int)d, vt, (int)d, 0.0f, dp, (int)cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                dp[r * cols + c] = p[r * cols + c] * (dp[r * cols + c] - delta[r]);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)d, (int)cols, scale,
                    dp, (int)cols, kt, (int)d, 1.0f, dq, (int)d);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)cols, (int)d, (int)rows, scale,
                    dp, (int)cols, qt, (int)d, 1.0f, dk_acc + j0 * d, (int)d);
    }
}

void dsi_cpu_attention_bwd(dsi_stype_t type, const ds_attention_shape_t *sh, int causal,
                           const void *dout, const void *q, const void *k, const void *v,
                           const void *o, const float *lse, void *dq, void *dk, void *dv,
                           float *scratch)
{
    const int64_t d = sh->head_dim, group = sh->heads / sh->kv_heads;
    float *qt = scratch, *dot = qt + TILE * d, *ot = dot + TILE * d, *dqt = ot + TILE * d;
    float *lse_t = dqt + 3 * TILE * d + 2 * TILE * TILE, *delta = lse_t + TILE;
    float *dk_acc = delta + TILE, *dv_acc = dk_acc + sh->seq_k * d;
    for (int64_t bk = 0; bk < sh->batch * sh->kv_heads; bk++) {
        int64_t b = bk / sh->kv_heads, kvh = bk % sh->kv_heads, kv_base = bk * sh->seq_k * d;
        memset(dk_acc, 0, (size_t)(2 * sh->seq_k * d) * sizeof(float));
        for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
            int64_t bh = b * sh->heads + h, q_base = bh * sh->seq_q * d;
            for (int64_t i0 = 0; i0 < sh->seq_q; i0 += TILE) {
                int64_t rows = sh->seq_q - i0 < TILE ? sh->seq_q - i0 : TILE;
                dsi_cpu_load(q, type, q_base + i0 * d, rows * d, qt);
                dsi_cpu_load(dout, type, q_base + i0 * d, rows * d, dot);
                dsi_cpu_load(o, type, q_base + i0 * d, rows * d, ot);
                memset(dqt, 0, (size_t)(rows * d) * sizeof(float));
                for (int64_t r = 0; r < rows; r++) {
                    float D = 0.0f;
                    for (int64_t e = 0; e < d; e++)
                        D += dot[r * d + e] * ot[r * d + e];
                    delta[r] = D;
                    lse_t[r] = lse[bh * sh->seq_q + i0 + r];
                }
                backward_tile(type, sh, causal, i0, rows, kv_base, k, v, scratch, dk_acc, dv_acc);
                dsi_cpu_store(dq, type, q_base + i0 * d, rows * d, dqt);
            }
        }
        dsi_cpu_store(dk, type, kv_base, sh->seq_k * d, dk_acc);
        dsi_cpu_store(dv, type, kv_base, sh->seq_k * d, dv_acc);
    }
}
