/* ember_dnnl.c: the C half of Ember's dnnl backend, compiled into every model library.
 *
 * Each step of a model that runs on oneDNN holds one `edn_step *` in static storage and calls
 * edn_run with its constant description. The first call builds the primitive (and the reorders
 * between Ember's plain NCHW / row-major layouts and the layouts oneDNN prefers), reorders the
 * constant weights once into the primitive's layout, and publishes the step; later calls only
 * execute. Building is serialized by one lock; running is lock-free (memory objects are made
 * per call, one stream per calling thread), so threads may run one model at once.
 * The state is derived from the weights: the generated C names their digest, so a library
 * (shared by every program with the same C) only ever serves one set of weights. */

/* ---- declarations (the kernels' preamble: all a model's C needs) ---- */
#include <stdint.h>
typedef struct edn_step edn_step;
enum { EDN_CONV, EDN_MATMUL, EDN_POOL_MAX, EDN_POOL_AVG, EDN_POOL_AVG_PAD };
enum { EDN_NONE, EDN_RELU, EDN_CLIP, EDN_LEAKY_RELU, EDN_SIGMOID, EDN_TANH, EDN_HARD_SIGMOID };
typedef struct {
    int kind, act, threads, bias, residual, const_wei, ndims;
    float alpha, beta;
    int64_t src[6], wei[6], dst[6];                     /* dims; conv weights are [O, C/G, KH, KW] */
    int64_t groups, kernel[2], stride[2], dilate[2], pad_l[2], pad_r[2];
    int64_t scratch;                                    /* bytes for blocked copies of src and dst */
} edn_desc;
int edn_run(edn_step *_Atomic *slot, const edn_desc *d, const void *x, const void *w, const void *b,
            const void *res, void *y, void *scratch);
/* ---- implementation ---- */
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct edn_step {
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim, src_in, dst_in, dst_out;     /* reorders: x -> src copy, res -> dst copy, copy -> y */
    dnnl_memory_desc_t user_src, user_wei, user_dst, bias;
    const_dnnl_memory_desc_t src, wei, dst, pad;        /* the primitive's (owned by pd) */
    void *weights;                                      /* constant weights in its layout, or NULL */
    size_t dst_at;                                      /* offset of the dst copy in scratch */
};

static pthread_mutex_t edn_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t edn_engine;
static _Thread_local dnnl_stream_t edn_stream;
static pthread_key_t edn_pads;                          /* per thread: oneDNN's scratchpad, grown */
static const dnnl_alg_kind_t edn_act[] = {dnnl_alg_kind_undef, dnnl_eltwise_relu, dnnl_eltwise_clip,
    dnnl_eltwise_relu, dnnl_eltwise_logistic, dnnl_eltwise_tanh, dnnl_eltwise_hardsigmoid};

#define OK(call) ((call) == dnnl_success)
#define ALIGN64(n) (((n) + 63) / 64 * 64)

static dnnl_memory_desc_t desc(int nd, const int64_t *dims, int plain) {
    dnnl_memory_desc_t md = NULL;
    dnnl_dims_t strides;
    for (int i = nd - 1; i >= 0; i--) strides[i] = i == nd - 1 ? 1 : strides[i + 1] * dims[i + 1];
    if (plain ? !OK(dnnl_memory_desc_create_with_strides(&md, nd, dims, dnnl_f32, strides))
              : !OK(dnnl_memory_desc_create_with_tag(&md, nd, dims, dnnl_f32, dnnl_format_tag_any)))
        return NULL;
    return md;
}

typedef struct { int arg; const_dnnl_memory_desc_t md; const void *ptr; } edn_arg;

static int execute(dnnl_primitive_t p, int n, const edn_arg *a) {
    dnnl_exec_arg_t args[5];
    int made = 0, ok = 1;
    for (; made < n && ok; made += ok) {
        args[made].arg = a[made].arg;
        ok = OK(dnnl_memory_create(&args[made].memory, a[made].md, edn_engine, (void *)a[made].ptr));
    }
    ok = ok && OK(dnnl_primitive_execute(p, edn_stream, n, args)) && OK(dnnl_stream_wait(edn_stream));
    while (made--) dnnl_memory_destroy(args[made].memory);
    return ok;
}

static int reorder(dnnl_primitive_t r, const_dnnl_memory_desc_t from, const void *x, const_dnnl_memory_desc_t to,
                   void *y) {
    edn_arg a[2] = {{DNNL_ARG_FROM, from, x}, {DNNL_ARG_TO, to, y}};
    return execute(r, 2, a);
}

/* A reorder from one layout to another; *r stays NULL where they are the same. */
static int reorder_between(dnnl_primitive_t *r, const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to) {
    dnnl_primitive_desc_t pd;
    if (dnnl_memory_desc_equal(from, to)) return 1;
    if (!OK(dnnl_reorder_primitive_desc_create(&pd, from, edn_engine, to, edn_engine, NULL))) return 0;
    int ok = OK(dnnl_primitive_create(r, pd));
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* The weights' dims: grouped conv weights [O, C/G, KH, KW] are [G, O/G, C/G, KH, KW] to oneDNN. */
static int weight_dims(const edn_desc *d, int64_t *dims) {
    int grouped = d->kind == EDN_CONV && d->groups > 1;
    if (grouped) dims[0] = d->groups, dims[1] = d->wei[0] / d->groups;
    memcpy(dims + 2 * grouped, d->wei + grouped, (size_t)(d->ndims - grouped) * sizeof(int64_t));
    return d->ndims + grouped;
}

/* The primitive descriptor; conv asks for oneDNN's preferred (blocked) layouts when their copies
 * fit the scratch Ember planned, plain NCHW otherwise. */
static int describe(edn_step *s, const edn_desc *d, dnnl_primitive_attr_t attr, int blocked) {
    int nd = d->ndims, pool = d->kind >= EDN_POOL_MAX;
    dnnl_dims_t dil = {d->dilate[0] - 1, d->dilate[1] - 1}, wdims;
    dnnl_memory_desc_t src = desc(nd, d->src, !blocked), dst = desc(nd, d->dst, !blocked);
    dnnl_memory_desc_t wei = pool ? NULL : desc(weight_dims(d, wdims), wdims, !d->const_wei);
    int ok = src && dst && (pool || wei);
    if (ok && d->kind == EDN_CONV)
        ok = OK(dnnl_convolution_forward_primitive_desc_create(&s->pd, edn_engine, dnnl_forward_inference,
                dnnl_convolution_direct, src, wei, s->bias, dst, d->stride, dil, d->pad_l, d->pad_r, attr));
    else if (ok && d->kind == EDN_MATMUL)
        ok = OK(dnnl_matmul_primitive_desc_create(&s->pd, edn_engine, src, wei, s->bias, dst, attr));
    else if (ok) {
        dnnl_alg_kind_t alg = d->kind == EDN_POOL_MAX ? dnnl_pooling_max : d->kind == EDN_POOL_AVG
                                  ? dnnl_pooling_avg_exclude_padding : dnnl_pooling_avg_include_padding;
        ok = OK(dnnl_pooling_forward_primitive_desc_create(&s->pd, edn_engine, dnnl_forward_inference, alg, src,
                dst, d->stride, d->kernel, dil, d->pad_l, d->pad_r, attr));
    }
    dnnl_memory_desc_destroy(src);
    dnnl_memory_desc_destroy(dst);
    if (wei) dnnl_memory_desc_destroy(wei);
    if (!ok) return 0;
    s->src = dnnl_primitive_desc_query_md(s->pd, dnnl_query_src_md, 0);
    s->dst = dnnl_primitive_desc_query_md(s->pd, dnnl_query_dst_md, 0);
    s->wei = pool ? NULL : dnnl_primitive_desc_query_md(s->pd, dnnl_query_weights_md, 0);
    s->pad = dnnl_primitive_desc_query_md(s->pd, dnnl_query_scratchpad_md, 0);
    size_t src_bytes = dnnl_memory_desc_equal(s->src, s->user_src) ? 0 : ALIGN64(dnnl_memory_desc_get_size(s->src));
    size_t dst_bytes = dnnl_memory_desc_equal(s->dst, s->user_dst) ? 0 : dnnl_memory_desc_get_size(s->dst);
    s->dst_at = src_bytes;
    if (src_bytes + dst_bytes <= (size_t)d->scratch) return 1;
    dnnl_primitive_desc_destroy(s->pd);
    s->pd = NULL;
    return 0;
}

/* Frees a step whose build failed (oneDNN refusing a form accepts() let through): the call fails. */
static edn_step *discard(edn_step *s) {
    dnnl_primitive_t prims[] = {s->prim, s->src_in, s->dst_in, s->dst_out};
    dnnl_memory_desc_t mds[] = {s->user_src, s->user_wei, s->user_dst, s->bias};
    for (int i = 0; i < 4; i++) {
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
        if (mds[i]) dnnl_memory_desc_destroy(mds[i]);
    }
    if (s->pd) dnnl_primitive_desc_destroy(s->pd);
    free(s->weights);
    free(s);
    return NULL;
}

static edn_step *build(const edn_desc *d, const void *w) {
    edn_step *s = calloc(1, sizeof *s);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_t wr = NULL;
    int nd = d->ndims, ok = s && OK(dnnl_primitive_attr_create(&attr)) && OK(dnnl_post_ops_create(&ops));
    ok = ok && (!d->residual || OK(dnnl_post_ops_append_sum(ops, 1.0f, 0, dnnl_data_type_undef)));
    ok = ok && (!d->act || OK(dnnl_post_ops_append_eltwise(ops, edn_act[d->act], d->alpha, d->beta)));
    ok = ok && OK(dnnl_primitive_attr_set_post_ops(attr, ops));
    ok = ok && OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (ok) {
        int64_t bias[6] = {1, 1, 1, 1, 1, 1};
        bias[nd - 1] = d->dst[nd - 1];
        if (d->kind == EDN_CONV) bias[0] = d->dst[1];
        s->user_src = desc(nd, d->src, 1);
        s->user_dst = desc(nd, d->dst, 1);
        if (d->bias) s->bias = desc(d->kind == EDN_CONV ? 1 : nd, bias, 1);
        ok = s->user_src && s->user_dst && (!d->bias || s->bias);
    }
    if (ok && d->kind != EDN_CONV) ok = describe(s, d, attr, 0);
    else if (ok) ok = describe(s, d, attr, 1) || describe(s, d, attr, 0);
    ok = ok && OK(dnnl_primitive_create(&s->prim, s->pd));
    ok = ok && reorder_between(&s->src_in, s->user_src, s->src) && reorder_between(&s->dst_out, s->dst, s->user_dst);
    if (ok && d->residual) ok = reorder_between(&s->dst_in, s->user_dst, s->dst);
    if (ok && d->const_wei) {  /* weights: once, into the primitive's layout */
        size_t bytes = dnnl_memory_desc_get_size(s->wei);
        ok = (s->weights = aligned_alloc(64, ALIGN64(bytes))) != NULL;
        dnnl_dims_t wdims;
        ok = ok && (s->user_wei = desc(weight_dims(d, wdims), wdims, 1)) != NULL;
        ok = ok && reorder_between(&wr, s->user_wei, s->wei);
        ok = ok && (wr ? reorder(wr, s->user_wei, w, s->wei, s->weights) : (memcpy(s->weights, w, bytes), 1));
        if (wr) dnnl_primitive_destroy(wr);
    }
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (ops) dnnl_post_ops_destroy(ops);
    return ok || !s ? s : discard(s);
}

/* oneDNN's max pooling skips NaN; Ember's (and NumPy's) propagates it: a window holding one gives NaN. */
static void propagate_nans(const edn_desc *d, const float *x, float *y) {
    int64_t h = d->src[2], w = d->src[3], oh = d->dst[2], ow = d->dst[3];
    for (int64_t p = 0; p < d->src[0] * d->src[1]; p++) {
        const float *xp = x + p * h * w;
        int nan = 0;
        for (int64_t i = 0; i < h * w; i++) nan |= xp[i] != xp[i];
        for (int64_t i = 0; nan && i < h * w; i++)
            for (int64_t u = 0; xp[i] != xp[i] && u < d->kernel[0] * d->kernel[1]; u++) {
                int64_t a = i / w + d->pad_l[0] - u / d->kernel[1] * d->dilate[0];
                int64_t b = i % w + d->pad_l[1] - u % d->kernel[1] * d->dilate[1];
                if (a >= 0 && b >= 0 && a % d->stride[0] == 0 && b % d->stride[1] == 0 && a / d->stride[0] < oh &&
                    b / d->stride[1] < ow)
                    y[(p * oh + a / d->stride[0]) * ow + b / d->stride[1]] = xp[i];
            }
    }
}

int edn_run(edn_step *_Atomic *slot, const edn_desc *d, const void *x, const void *w, const void *b,
            const void *res, void *y, void *scratch) {
    int saved = omp_get_max_threads(), ok = 1;
    omp_set_num_threads(d->threads);
    edn_step *s = atomic_load_explicit(slot, memory_order_acquire);
    if (!s) {
        pthread_mutex_lock(&edn_lock);
        ok = edn_engine || (OK(dnnl_engine_create(&edn_engine, dnnl_cpu, 0)) && !pthread_key_create(&edn_pads, free));
        ok = ok && (edn_stream || OK(dnnl_stream_create(&edn_stream, edn_engine, dnnl_stream_default_flags)));
        if (ok && !(s = atomic_load_explicit(slot, memory_order_relaxed)) && (s = build(d, w)))
            atomic_store_explicit(slot, s, memory_order_release);
        pthread_mutex_unlock(&edn_lock);
    }
    ok = ok && s && (edn_stream || OK(dnnl_stream_create(&edn_stream, edn_engine, dnnl_stream_default_flags)));
    if (ok) {
        char *tmp = scratch;
        void *dst = s->dst_out ? tmp + s->dst_at : y;
        const void *src = s->src_in ? tmp : x;
        if (s->src_in) ok = reorder(s->src_in, s->user_src, x, s->src, tmp);
        if (ok && d->residual && s->dst_in) ok = reorder(s->dst_in, s->user_dst, res, s->dst, dst);
        else if (ok && d->residual && res != y) memmove(y, res, dnnl_memory_desc_get_size(s->user_dst));
        size_t need = dnnl_memory_desc_get_size(s->pad), *pad = pthread_getspecific(edn_pads);
        if (ok && (!pad || *pad < need) && (ok = (pad = aligned_alloc(64, ALIGN64(need) + 64)) != NULL)) {
            free(pthread_getspecific(edn_pads));
            pthread_setspecific(edn_pads, pad);
            *pad = need;
        }
        edn_arg a[5] = {{DNNL_ARG_SRC, s->src, src}, {DNNL_ARG_DST, s->dst, dst}, {DNNL_ARG_SCRATCHPAD, s->pad, pad + 8},
                        {DNNL_ARG_WEIGHTS, s->wei, s->weights ? s->weights : w}, {DNNL_ARG_BIAS, s->bias, b}};
        ok = ok && execute(s->prim, s->wei ? 4 + d->bias : 3, a);
        if (ok && s->dst_out) ok = reorder(s->dst_out, s->dst, dst, s->user_dst, y);
        if (ok && d->kind == EDN_POOL_MAX) propagate_nans(d, x, y);
    }
    omp_set_num_threads(saved);
    return !ok;
}
