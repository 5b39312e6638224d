// A fake libcudnn for the emulation (testing only): the backend-API subset kernels/cuda/
// cudnn_attention.cu uses, found through the emulated dlopen/dlsym (include/dlfcn.h). It checks
// what real cuDNN would refuse and more: every attribute against the type and count cuDNN
// expects for its descriptor, required attributes at finalize, tensors' dims, strides and
// alignment against each operation's shapes, each virtual tensor made by one operation and used,
// unique UIDs, and that a variant pack supplies every UID of the graph (device pointers with the
// promised alignment, host pointers for by-value scalars) and nothing else. It recognises the two
// SDPA graphs (the roles of their tensors found from the graph's structure) and executes them
// with the CPU attention on the bf16 operands; the statistics handed to backward must be at least
// the forward's log-sum-exp. Context parallelism's ring blocks take the same graphs with s_q !=
// s_kv, no causal mask (a full rectangle) and rows of a longer sequence in memory, and a backward
// whose Stats is the ring's merged log-sum-exp (over more keys than the block's): those run by the
// formulas in double (run_block), with the same version corruptions. Document masks take the frontend's forms: a padding mask (the scores'
// GEN_INDEX rows and columns CMP_LT INT32 (B, 1, 1, 1) seq_len_q / seq_len_kv, LOGICAL_AND, a
// BINARY_SELECT on the score chain before the softmax) with every matmul's M/N/K overrides set to
// the sequence lengths of its dims, and optionally ragged rows (RAGGED_OFFSET_DESC: INT32
// (B + 1, 1, 1, 1) element offsets, non-decreasing, each entry inside its span) on Q, O, dO, dQ
// and on K, V, dK, dV. Each batch entry then runs as its own sequence of seq_len tokens; rows past
// it are left as they were (cuDNN does not define them). FSDPC_EMU_CUDNN: "missing" (dlopen fails), "nofinalize" (no engine
// finalizes into a plan), "wrong" (results are off). At FSDPC_EMU_CUDNN_VERSION it accepts and
// corrupts a backward where that real version would without the frontend's guard: before 9.6 dQ
// adds into whatever the accumulator holds; up to 9.15.0, without a padding mask at T % 128 != 0,
// garbage past the last whole 128 rows; from 9.0 to 9.9, a padding-masked graph without the
// second mask after - Stats gets wrong dK and dV (9.10.0 and 9.10.1 run: fsdpc refuses them).
#include <cudnn_graph.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "emu_device.h"
extern "C" {
#include "kernels/backend.h"
}

namespace {

bool mode_is(const char *m) {
    const char *e = getenv("FSDPC_EMU_CUDNN");
    return e && !strcmp(e, m);
}

// The library's version and the GPU's SM, which the support surface depends on:
// FSDPC_EMU_CUDNN_VERSION (default 91900, cuDNN 9.19.0) and FSDPC_EMU_SM (default 90, Hopper).
int64_t env_int(const char *name, int64_t dflt) {
    const char *e = getenv(name);
    return e && *e ? strtoll(e, nullptr, 10) : dflt;
}
int64_t version() { return env_int("FSDPC_EMU_CUDNN_VERSION", 91900); }
int64_t sm() { return env_int("FSDPC_EMU_SM", 90); }

// a refusal is printed, so a test that expected cuDNN to run shows why it did not, and kept for
// cudnnGetLastErrorString
char last_error[512];
cudnnStatus_t refuse(cudnnStatus_t s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "emu cudnn: %s\n", last_error);
    return s;
}
#define REFUSE_IF(cond, status, ...) \
    do {                             \
        if (cond) return refuse(status, __VA_ARGS__); \
    } while (0)

struct Attr {
    cudnnBackendAttributeType_t type;
    std::vector<char> bytes;
    int64_t n;
};

struct Desc;
// a tensor's parsed attributes
struct Tensor {
    cudnnDataType_t dt;
    int nd;
    int64_t dim[8], stride[8], uid, align;
    bool virt, by_value;
    Desc *ragged;  // the (B + 1) element offsets of the batch entries, or nullptr
};
// the roles the SDPA graphs give their caller tensors
struct Sdpa {
    bool bwd;
    int64_t B, T, H, KV, hd;
    // ring blocks: Tk keys (T: the queries), each batch entry's rows Sq and Sk apart in memory, and
    // no causal mask (a full rectangle)
    int64_t Tk, Sq, Sk;
    bool causal;
    Desc *q, *kt, *v, *o, *stats, *scale, *neg_inf, *dout, *sum, *dq, *dk, *dv;
    Desc *one, *dq_accum;  // backward: softmax_sum's factor, dQ's FLOAT accumulator
    Desc *seq_q, *seq_kv, *off_q, *off_kv;  // document masks: the padding mask's lengths, ragged offsets
    bool pad2;  // backward: the padding mask again after - Stats (the frontend's for cuDNN 9.0 to 9.9)
};

struct Desc {
    cudnnBackendDescriptorType_t type;
    bool final = false;
    std::map<int, Attr> attrs;
    Tensor t{};
    std::vector<Desc *> ops;  // an operation graph's
    Desc *graph = nullptr;    // an engine config's, a plan's
    Sdpa sdpa{};              // an operation graph's
};
std::set<Desc *> live;
int plans_built;  // execution plans finalized, for the plan cache's test
int doc_execs;    // executions of document-masked (padding mask) graphs
int block_execs;  // executions of ring blocks (run_block)
cudaStream_t exec_stream;

// The attributes cuDNN takes per descriptor type: type, count range, required at finalize.
struct Rule {
    cudnnBackendDescriptorType_t d;
    cudnnBackendAttributeName_t a;
    cudnnBackendAttributeType_t t;
    int64_t min, max;
    bool required;
};
#define D_(x) CUDNN_BACKEND_##x##_DESCRIPTOR
#define A_(x) CUDNN_ATTR_##x
#define T_(x) CUDNN_TYPE_##x
const Rule rules[] = {
    {D_(TENSOR), A_(TENSOR_DATA_TYPE), T_(DATA_TYPE), 1, 1, true},
    {D_(TENSOR), A_(TENSOR_DIMENSIONS), T_(INT64), 1, 8, true},
    {D_(TENSOR), A_(TENSOR_STRIDES), T_(INT64), 1, 8, true},
    {D_(TENSOR), A_(TENSOR_UNIQUE_ID), T_(INT64), 1, 1, true},
    {D_(TENSOR), A_(TENSOR_BYTE_ALIGNMENT), T_(INT64), 1, 1, true},
    {D_(TENSOR), A_(TENSOR_IS_VIRTUAL), T_(BOOLEAN), 1, 1, false},
    {D_(TENSOR), A_(TENSOR_IS_BY_VALUE), T_(BOOLEAN), 1, 1, false},
    {D_(TENSOR), A_(TENSOR_RAGGED_OFFSET_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(POINTWISE), A_(POINTWISE_MODE), T_(POINTWISE_MODE), 1, 1, true},
    {D_(POINTWISE), A_(POINTWISE_MATH_PREC), T_(DATA_TYPE), 1, 1, true},
    {D_(POINTWISE), A_(POINTWISE_AXIS), T_(INT64), 1, 1, false},
    {D_(OPERATION_POINTWISE), A_(OPERATION_POINTWISE_PW_DESCRIPTOR), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_POINTWISE), A_(OPERATION_POINTWISE_XDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_POINTWISE), A_(OPERATION_POINTWISE_BDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_POINTWISE), A_(OPERATION_POINTWISE_TDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_POINTWISE), A_(OPERATION_POINTWISE_YDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(REDUCTION), A_(REDUCTION_OPERATOR), T_(REDUCTION_OPERATOR_TYPE), 1, 1, true},
    {D_(REDUCTION), A_(REDUCTION_COMP_TYPE), T_(DATA_TYPE), 1, 1, true},
    {D_(OPERATION_REDUCTION), A_(OPERATION_REDUCTION_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_REDUCTION), A_(OPERATION_REDUCTION_XDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_REDUCTION), A_(OPERATION_REDUCTION_YDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(MATMUL), A_(MATMUL_COMP_TYPE), T_(DATA_TYPE), 1, 1, true},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_ADESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_BDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_CDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_MATMUL), A_(OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_RESHAPE), A_(OPERATION_RESHAPE_XDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_RESHAPE), A_(OPERATION_RESHAPE_YDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATIONGRAPH), A_(OPERATIONGRAPH_HANDLE), T_(HANDLE), 1, 1, true},
    {D_(OPERATIONGRAPH), A_(OPERATIONGRAPH_OPS), T_(BACKEND_DESCRIPTOR), 1, 256, true},
    {D_(ENGINEHEUR), A_(ENGINEHEUR_OPERATION_GRAPH), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(ENGINEHEUR), A_(ENGINEHEUR_MODE), T_(HEUR_MODE), 1, 1, true},
    {D_(EXECUTION_PLAN), A_(EXECUTION_PLAN_HANDLE), T_(HANDLE), 1, 1, true},
    {D_(EXECUTION_PLAN), A_(EXECUTION_PLAN_ENGINE_CONFIG), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(VARIANT_PACK), A_(VARIANT_PACK_UNIQUE_IDS), T_(INT64), 1, 64, true},
    {D_(VARIANT_PACK), A_(VARIANT_PACK_DATA_POINTERS), T_(VOID_PTR), 1, 64, true},
    {D_(VARIANT_PACK), A_(VARIANT_PACK_WORKSPACE), T_(VOID_PTR), 1, 1, true},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_QDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_KDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_VDESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_ODESC), T_(BACKEND_DESCRIPTOR), 1, 1, true},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_STATSDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_SCALEDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_BLOCK_MASK_DESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_PAGE_TABLE_KDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_PAGE_TABLE_VDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_SEQ_LEN_QDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
    {D_(OPERATION_SDPA_FWD), A_(OPERATION_SDPA_FWD_SEQ_LEN_KVDESC), T_(BACKEND_DESCRIPTOR), 1, 1, false},
};

size_t elem_bytes(cudnnBackendAttributeType_t t) {
    switch (t) {
    case T_(HANDLE): case T_(BACKEND_DESCRIPTOR): case T_(VOID_PTR): return sizeof(void *);
    case T_(INT64): return 8;
    case T_(BOOLEAN): return sizeof(bool);
    default: return sizeof(int);  // the enums
    }
}

template <class T> const T *get(const Desc *d, cudnnBackendAttributeName_t a) {
    auto it = d->attrs.find(a);
    return it == d->attrs.end() ? nullptr : (const T *)it->second.bytes.data();
}
Desc *ref(const Desc *d, cudnnBackendAttributeName_t a) {
    auto p = get<Desc *>(d, a);
    return p ? *p : nullptr;
}
int64_t count(const Desc *d, cudnnBackendAttributeName_t a) {
    auto it = d->attrs.find(a);
    return it == d->attrs.end() ? 0 : it->second.n;
}
size_t dt_bytes(cudnnDataType_t dt) {
    return dt == CUDNN_DATA_BFLOAT16 || dt == CUDNN_DATA_HALF ? 2 : dt == CUDNN_DATA_BOOLEAN ? 1 : 4;
}
bool is_op(const Desc *d) {
    return d->type == D_(OPERATION_POINTWISE) || d->type == D_(OPERATION_REDUCTION) ||
           d->type == D_(OPERATION_MATMUL) || d->type == D_(OPERATION_RESHAPE) || d->type == D_(OPERATION_SDPA_FWD);
}
int64_t elems(const Tensor &t) {
    int64_t n = 1;
    for (int i = 0; i < t.nd; i++) n *= t.dim[i];
    return n;
}
// x broadcasts to y: each dim equal or 1
bool broadcasts(const Tensor &x, const Tensor &y) {
    if (x.nd != y.nd) return false;
    for (int i = 0; i < x.nd; i++)
        if (x.dim[i] != y.dim[i] && x.dim[i] != 1) return false;
    return true;
}
bool same_dims(const Tensor &a, const Tensor &b) {
    return a.nd == b.nd && !memcmp(a.dim, b.dim, sizeof(int64_t) * a.nd);
}

cudnnStatus_t finalize_tensor(Desc *d) {
    Tensor &t = d->t;
    t.dt = *get<cudnnDataType_t>(d, A_(TENSOR_DATA_TYPE));
    t.nd = (int)count(d, A_(TENSOR_DIMENSIONS));
    REFUSE_IF(count(d, A_(TENSOR_STRIDES)) != t.nd, CUDNN_STATUS_BAD_PARAM, "tensor: %d dims but %lld strides", t.nd,
              (long long)count(d, A_(TENSOR_STRIDES)));
    memcpy(t.dim, get<int64_t>(d, A_(TENSOR_DIMENSIONS)), sizeof(int64_t) * t.nd);
    memcpy(t.stride, get<int64_t>(d, A_(TENSOR_STRIDES)), sizeof(int64_t) * t.nd);
    t.uid = *get<int64_t>(d, A_(TENSOR_UNIQUE_ID));
    t.align = *get<int64_t>(d, A_(TENSOR_BYTE_ALIGNMENT));
    auto v = get<bool>(d, A_(TENSOR_IS_VIRTUAL));
    auto bv = get<bool>(d, A_(TENSOR_IS_BY_VALUE));
    t.virt = v && *v, t.by_value = bv && *bv;
    for (int i = 0; i < t.nd; i++)
        REFUSE_IF(t.dim[i] <= 0 || t.stride[i] <= 0, CUDNN_STATUS_BAD_PARAM, "tensor %lld: dim %d is %lld, stride %lld",
                  (long long)t.uid, i, (long long)t.dim[i], (long long)t.stride[i]);
    REFUSE_IF(t.align <= 0 || (t.align & (t.align - 1)) || t.align < (int64_t)dt_bytes(t.dt), CUDNN_STATUS_BAD_PARAM,
              "tensor %lld: byte alignment %lld", (long long)t.uid, (long long)t.align);
    REFUSE_IF(t.virt && t.by_value, CUDNN_STATUS_BAD_PARAM, "tensor %lld: virtual and by value", (long long)t.uid);
    REFUSE_IF(t.by_value && elems(t) != 1, CUDNN_STATUS_BAD_PARAM, "tensor %lld: by value but not a scalar",
              (long long)t.uid);
    t.ragged = ref(d, A_(TENSOR_RAGGED_OFFSET_DESC));
    if (t.ragged) {
        const Tensor &r = t.ragged->t;
        const int64_t want[4] = {t.dim[0] + 1, 1, 1, 1};
        REFUSE_IF(t.ragged->type != D_(TENSOR) || r.dt != CUDNN_DATA_INT32 || r.nd != 4 || memcmp(r.dim, want, sizeof want) ||
                      r.virt || r.by_value || r.ragged || t.nd != 4 || t.by_value,
                  CUDNN_STATUS_BAD_PARAM, "tensor %lld: the ragged offsets are not a real INT32 (%lld, 1, 1, 1) tensor",
                  (long long)t.uid, (long long)t.dim[0] + 1);
    }
    return CUDNN_STATUS_SUCCESS;
}

// an INT32 (B, 1, 1, 1) tensor of per-batch-entry sizes, which the caller supplies
bool is_lengths(const Desc *d, int64_t B) {
    const int64_t want[4] = {B, 1, 1, 1};
    return d && d->t.dt == CUDNN_DATA_INT32 && d->t.nd == 4 && !memcmp(d->t.dim, want, sizeof want) && !d->t.virt &&
           !d->t.by_value && !d->t.ragged;
}

cudnnPointwiseMode_t pw_mode(const Desc *op) {
    return *get<cudnnPointwiseMode_t>(ref(op, A_(OPERATION_POINTWISE_PW_DESCRIPTOR)), A_(POINTWISE_MODE));
}

cudnnStatus_t finalize_op(Desc *d) {
    switch (d->type) {
    case D_(OPERATION_POINTWISE): {
        const Desc *pw = ref(d, A_(OPERATION_POINTWISE_PW_DESCRIPTOR));
        REFUSE_IF(pw->type != D_(POINTWISE), CUDNN_STATUS_BAD_PARAM, "pointwise operation: not a pointwise descriptor");
        const cudnnPointwiseMode_t m = pw_mode(d);
        const Desc *x = ref(d, A_(OPERATION_POINTWISE_XDESC)), *b = ref(d, A_(OPERATION_POINTWISE_BDESC));
        const Desc *t = ref(d, A_(OPERATION_POINTWISE_TDESC)), *y = ref(d, A_(OPERATION_POINTWISE_YDESC));
        const bool unary = m == CUDNN_POINTWISE_EXP || m == CUDNN_POINTWISE_LOG || m == CUDNN_POINTWISE_GEN_INDEX ||
                           m == CUDNN_POINTWISE_IDENTITY;
        const bool select = m == CUDNN_POINTWISE_BINARY_SELECT;
        REFUSE_IF(!!b == unary || !!t != select, CUDNN_STATUS_BAD_PARAM, "pointwise mode %d: wrong operands", (int)m);
        REFUSE_IF(!same_dims(x->t, y->t) && !(broadcasts(x->t, y->t) && b && same_dims(b->t, y->t)),
                  CUDNN_STATUS_BAD_PARAM, "pointwise mode %d: x does not match y", (int)m);
        REFUSE_IF(b && !broadcasts(b->t, y->t), CUDNN_STATUS_BAD_PARAM, "pointwise mode %d: b does not broadcast to y",
                  (int)m);
        REFUSE_IF(t && (!broadcasts(t->t, y->t) || t->t.dt != CUDNN_DATA_BOOLEAN), CUDNN_STATUS_BAD_PARAM,
                  "binary select: the condition is not a boolean of y's shape");
        const bool logic = m == CUDNN_POINTWISE_CMP_GE || m == CUDNN_POINTWISE_CMP_LT || m == CUDNN_POINTWISE_LOGICAL_AND;
        REFUSE_IF(logic && y->t.dt != CUDNN_DATA_BOOLEAN, CUDNN_STATUS_BAD_PARAM, "comparison into a non-boolean tensor");
        REFUSE_IF(m == CUDNN_POINTWISE_LOGICAL_AND && (x->t.dt != CUDNN_DATA_BOOLEAN || b->t.dt != CUDNN_DATA_BOOLEAN),
                  CUDNN_STATUS_BAD_PARAM, "logical and of non-booleans");
        REFUSE_IF(m == CUDNN_POINTWISE_GEN_INDEX && y->t.dt != CUDNN_DATA_INT32, CUDNN_STATUS_BAD_PARAM,
                  "an index into a non-INT32 tensor");
        return CUDNN_STATUS_SUCCESS;
    }
    case D_(OPERATION_REDUCTION): {
        const Desc *x = ref(d, A_(OPERATION_REDUCTION_XDESC)), *y = ref(d, A_(OPERATION_REDUCTION_YDESC));
        bool reduced = false;
        REFUSE_IF(x->t.nd != y->t.nd, CUDNN_STATUS_BAD_PARAM, "reduction: ranks differ");
        for (int i = 0; i < x->t.nd; i++) {
            REFUSE_IF(x->t.dim[i] % y->t.dim[i], CUDNN_STATUS_BAD_PARAM, "reduction: dim %d from %lld to %lld", i,
                      (long long)x->t.dim[i], (long long)y->t.dim[i]);
            reduced |= x->t.dim[i] != y->t.dim[i];
        }
        REFUSE_IF(!reduced, CUDNN_STATUS_BAD_PARAM, "reduction over nothing");
        return CUDNN_STATUS_SUCCESS;
    }
    case D_(OPERATION_MATMUL): {
        const Tensor &a = ref(d, A_(OPERATION_MATMUL_ADESC))->t, &b = ref(d, A_(OPERATION_MATMUL_BDESC))->t;
        const Tensor &c = ref(d, A_(OPERATION_MATMUL_CDESC))->t;
        REFUSE_IF(a.nd != 4 || b.nd != 4 || c.nd != 4, CUDNN_STATUS_BAD_PARAM, "matmul: not 4-d");
        // sdpa_support_surface.h, validate_sdpa_support_surface: "For group-query attention, number of
        // heads for key and query must be a factor of number of heads for query"
        REFUSE_IF(a.dim[1] % b.dim[1] || c.dim[1] % b.dim[1], CUDNN_STATUS_NOT_SUPPORTED,
                  "heads %% kv_heads: %lld query heads are not a multiple of %lld key/value heads (group-query "
                  "attention needs heads %% kv_heads == 0)", (long long)c.dim[1], (long long)b.dim[1]);
        REFUSE_IF(a.dim[3] != b.dim[2] || c.dim[2] != a.dim[2] || c.dim[3] != b.dim[3], CUDNN_STATUS_BAD_PARAM,
                  "matmul: (%lld x %lld) (%lld x %lld) into (%lld x %lld)", (long long)a.dim[2], (long long)a.dim[3],
                  (long long)b.dim[2], (long long)b.dim[3], (long long)c.dim[2], (long long)c.dim[3]);
        for (int i = 0; i < 2; i++)
            REFUSE_IF(c.dim[i] != a.dim[i] || a.dim[i] % b.dim[i], CUDNN_STATUS_BAD_PARAM,
                      "matmul: batch dim %d is %lld, %lld into %lld", i, (long long)a.dim[i], (long long)b.dim[i],
                      (long long)c.dim[i]);
        for (auto o : {A_(OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC), A_(OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC),
                       A_(OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC)})
            REFUSE_IF(ref(d, o) && !is_lengths(ref(d, o), c.dim[0]), CUDNN_STATUS_BAD_PARAM,
                      "matmul: an override is not a real INT32 (%lld, 1, 1, 1) tensor", (long long)c.dim[0]);
        return CUDNN_STATUS_SUCCESS;
    }
    case D_(OPERATION_SDPA_FWD): {
        // The unified SDPA operation: the frontend's UnifiedSDPANode
        // (sdpa_support_surface.h, verify_sdpa_support_surface_for_implementation, UNIFIED)
        const int64_t v = version();
        REFUSE_IF(v < 91301, CUDNN_STATUS_NOT_SUPPORTED, "unified SDPA: the unified SDPA node requires cuDNN 9.13.1 "
                  "(this is %lld); build the composite graph", (long long)v);
        REFUSE_IF(ref(d, A_(OPERATION_SDPA_FWD_BLOCK_MASK_DESC)) && v < 91400, CUDNN_STATUS_NOT_SUPPORTED,
                  "unified SDPA: inputs other than Q, K, V and Attn_scale (a block mask) need cuDNN 9.14");
        REFUSE_IF((ref(d, A_(OPERATION_SDPA_FWD_SEQ_LEN_QDESC)) || ref(d, A_(OPERATION_SDPA_FWD_SEQ_LEN_KVDESC)) ||
                   ref(d, A_(OPERATION_SDPA_FWD_PAGE_TABLE_KDESC)) || ref(d, A_(OPERATION_SDPA_FWD_PAGE_TABLE_VDESC))) &&
                      v < 91500,
                  CUDNN_STATUS_NOT_SUPPORTED,
                  "unified SDPA: inputs other than Q, K, V and Attn_scale (sequence lengths, page tables) need cuDNN 9.15");
        // fsdpc's attention is causal: the unified node has no diagonal alignment or bounds before
        // cuDNN 9.21, and the emulation executes composite graphs only
        return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                      "unified SDPA: causal masking is not among its inputs (Q, K, V, Attn_scale) before cuDNN 9.21: "
                      "this attention needs the composite SDPA graph");
    }
    default: {  // reshape
        const Tensor &x = ref(d, A_(OPERATION_RESHAPE_XDESC))->t, &y = ref(d, A_(OPERATION_RESHAPE_YDESC))->t;
        REFUSE_IF(elems(x) != elems(y), CUDNN_STATUS_BAD_PARAM, "reshape: element counts differ");
        return CUDNN_STATUS_SUCCESS;
    }
    }
}

// the tensors an operation reads and writes
void op_io(const Desc *op, std::vector<Desc *> &in, Desc **out) {
    switch (op->type) {
    case D_(OPERATION_POINTWISE):
        for (auto a : {A_(OPERATION_POINTWISE_XDESC), A_(OPERATION_POINTWISE_BDESC), A_(OPERATION_POINTWISE_TDESC)})
            if (ref(op, a)) in.push_back(ref(op, a));
        *out = ref(op, A_(OPERATION_POINTWISE_YDESC));
        break;
    case D_(OPERATION_REDUCTION):
        in.push_back(ref(op, A_(OPERATION_REDUCTION_XDESC)));
        *out = ref(op, A_(OPERATION_REDUCTION_YDESC));
        break;
    case D_(OPERATION_MATMUL):
        in.push_back(ref(op, A_(OPERATION_MATMUL_ADESC)));
        in.push_back(ref(op, A_(OPERATION_MATMUL_BDESC)));
        for (auto o : {A_(OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC), A_(OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC),
                       A_(OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC)})
            if (ref(op, o)) in.push_back(ref(op, o));
        *out = ref(op, A_(OPERATION_MATMUL_CDESC));
        break;
    default:
        in.push_back(ref(op, A_(OPERATION_RESHAPE_XDESC)));
        *out = ref(op, A_(OPERATION_RESHAPE_YDESC));
    }
}

// (B, T, heads, hd) rows seen as (B, heads, T, hd), or transposed as (B, heads, hd, T)
// (B, S, heads, hd) rows, of which the view takes T <= S per batch entry (a ring block's); *S
bool rows_view(const Tensor &t, bool transposed, int64_t *S = nullptr) {
    const int64_t n = t.dim[1], T = transposed ? t.dim[3] : t.dim[2], hd = transposed ? t.dim[2] : t.dim[3];
    const int64_t want[3] = {hd, transposed ? 1 : n * hd, transposed ? n * hd : 1};
    if (S) *S = t.stride[0] / (n * hd);
    return t.nd == 4 && !memcmp(t.stride + 1, want, sizeof want) && t.stride[0] % (n * hd) == 0 &&
           t.stride[0] >= T * n * hd;
}

Desc *in_x(const Desc *op) { return ref(op, A_(OPERATION_POINTWISE_XDESC)); }
Desc *in_a(const Desc *op) { return op->type == D_(OPERATION_MATMUL) ? ref(op, A_(OPERATION_MATMUL_ADESC)) : nullptr; }
Desc *in_b(const Desc *op) { return ref(op, A_(OPERATION_POINTWISE_BDESC)); }
// the pointwise operation of mode m (and GEN_INDEX axis) that made t, or nullptr
const Desc *made_by(std::map<Desc *, Desc *> &producer, Desc *t, cudnnPointwiseMode_t m, int64_t axis = -1) {
    auto it = producer.find(t);
    if (it == producer.end() || it->second->type != D_(OPERATION_POINTWISE) || pw_mode(it->second) != m) return nullptr;
    if (axis >= 0 && *get<int64_t>(ref(it->second, A_(OPERATION_POINTWISE_PW_DESCRIPTOR)), A_(POINTWISE_AXIS)) != axis)
        return nullptr;
    return it->second;
}

// The masks of the SDPA graph: each BINARY_SELECT must be the causal mask (GEN_INDEX rows of the
// score it masks CMP_GE its columns) or the padding mask (rows CMP_LT seq_len_q LOGICAL_AND
// columns CMP_LT seq_len_kv), and both must lie on the score chain from Q K^T to the softmax.
// With a padding mask every matmul bounds its dims by the sequence lengths of its operands'
// roles, and ragged offsets go on the query-shaped and kv-shaped tensors (one tensor each).
cudnnStatus_t recognise_masks(Desc *g, std::map<Desc *, Desc *> &producer) {
    Sdpa &s = g->sdpa;
    std::map<const Desc *, char> kind;  // select operation: 'c'ausal or 'p'adding
    for (Desc *op : g->ops) {
        if (op->type != D_(OPERATION_POINTWISE) || pw_mode(op) != CUDNN_POINTWISE_BINARY_SELECT) continue;
        Desc *score = in_x(op), *cond = ref(op, A_(OPERATION_POINTWISE_TDESC));
        REFUSE_IF(in_b(op) != s.neg_inf, CUDNN_STATUS_NOT_SUPPORTED, "the masks select different masked scores");
        const Desc *ge = made_by(producer, cond, CUDNN_POINTWISE_CMP_GE), *both = made_by(producer, cond, CUDNN_POINTWISE_LOGICAL_AND);
        if (ge) {
            const Desc *row = made_by(producer, in_x(ge), CUDNN_POINTWISE_GEN_INDEX, 2);
            const Desc *col = made_by(producer, in_b(ge), CUDNN_POINTWISE_GEN_INDEX, 3);
            REFUSE_IF(!row || !col || in_x(row) != score || in_x(col) != score, CUDNN_STATUS_NOT_SUPPORTED,
                      "a mask compares something other than the rows and columns of the scores it masks");
            kind[op] = 'c';
            continue;
        }
        // sdpa_support_surface.h, validate_sdpa_support_surface: "Padding mask requires seq_len_q and
        // seq_len_kv to be set."
        const Desc *lt_one = made_by(producer, cond, CUDNN_POINTWISE_CMP_LT);
        REFUSE_IF(lt_one, CUDNN_STATUS_NOT_SUPPORTED,
                  "padding mask: it requires both seq_len_q and seq_len_kv (this one compares one index only)");
        REFUSE_IF(!both, CUDNN_STATUS_NOT_SUPPORTED, "a mask is neither causal nor a padding mask");
        const Desc *lt_r = made_by(producer, in_x(both), CUDNN_POINTWISE_CMP_LT);
        const Desc *lt_c = made_by(producer, in_b(both), CUDNN_POINTWISE_CMP_LT);
        const Desc *row = lt_r ? made_by(producer, in_x(lt_r), CUDNN_POINTWISE_GEN_INDEX, 2) : nullptr;
        const Desc *col = lt_c ? made_by(producer, in_x(lt_c), CUDNN_POINTWISE_GEN_INDEX, 3) : nullptr;
        REFUSE_IF(!row || !col || in_x(row) != score || in_x(col) != score, CUDNN_STATUS_NOT_SUPPORTED,
                  "the padding mask is not (score rows < seq_len_q) and (score columns < seq_len_kv)");
        REFUSE_IF(!is_lengths(in_b(lt_r), s.B) || !is_lengths(in_b(lt_c), s.B), CUDNN_STATUS_NOT_SUPPORTED,
                  "the padding mask's lengths are not real INT32 (%lld, 1, 1, 1) tensors", (long long)s.B);
        REFUSE_IF(s.seq_q && (s.seq_q != in_b(lt_r) || s.seq_kv != in_b(lt_c)), CUDNN_STATUS_NOT_SUPPORTED,
                  "two padding masks");
        s.seq_q = in_b(lt_r), s.seq_kv = in_b(lt_c);
        kind[op] = 'p';
    }
    // the score chain: from Q K^T through scale, masks and Stats to the softmax's max (forward) or exp
    Desc *cur = nullptr;
    for (Desc *op : g->ops)
        if (op->type == D_(OPERATION_MATMUL) && ref(op, A_(OPERATION_MATMUL_ADESC)) == s.q &&
            ref(op, A_(OPERATION_MATMUL_BDESC)) == s.kt)
            cur = ref(op, A_(OPERATION_MATMUL_CDESC));
    int causal = 0, padding = 0;
    std::string order;  // S scale, P padding mask, L - Stats, C causal mask
    for (int steps = 0; cur && steps < 16; steps++) {
        Desc *next = nullptr;
        bool end = false;
        char code = '?';
        for (Desc *op : g->ops) {
            std::vector<Desc *> in;
            Desc *out;
            op_io(op, in, &out);
            if (in.empty() || in[0] != cur) continue;
            if (op->type == D_(OPERATION_REDUCTION) || (op->type == D_(OPERATION_POINTWISE) && pw_mode(op) == CUDNN_POINTWISE_EXP))
                end = true;
            else if (op->type == D_(OPERATION_POINTWISE) && pw_mode(op) != CUDNN_POINTWISE_GEN_INDEX && !next) {
                next = out;
                causal += kind.count(op) && kind[op] == 'c', padding += kind.count(op) && kind[op] == 'p';
                code = kind.count(op) ? (kind[op] == 'c' ? 'C' : 'P')
                       : pw_mode(op) == CUDNN_POINTWISE_MUL && in_b(op) == s.scale ? 'S'
                       : pw_mode(op) == CUDNN_POINTWISE_SUB && in_b(op) == s.stats ? 'L'
                                                                                   : '?';
            }
        }
        if (end) break;
        order += code;
        cur = next;
    }
    // The fused pattern's order: the frontend's CompositeSDPANode / CompositeSDPABackwardNode
    // (scaled_dot_product_flash_attention.h, expand_node) put the scale first, then the padding
    // mask, (backward: subtract Stats, [the padding mask again],) then the causal (right-bound
    // diagonal band) mask
    s.pad2 = s.bwd && order.rfind("SPLP", 0) == 0;
    s.causal = !order.empty() && order.back() == 'C';  // without it, a full rectangle (a ring block)
    const std::string want_order =
        std::string("S") + (s.seq_q ? "P" : "") + (s.bwd ? "L" : "") + (s.pad2 ? "P" : "") + (s.causal ? "C" : "");
    if (order != want_order) {
        std::string got;
        for (char c : order)
            got += std::string(got.empty() ? "" : ", ") +
                   (c == 'S' ? "scale" : c == 'P' ? "padding mask" : c == 'L' ? "- Stats" : c == 'C' ? "causal mask" : "other");
        return refuse(CUDNN_STATUS_NOT_SUPPORTED,
                      "operation order: the scores go Q.K^T, %s, then the softmax; the fused pattern is Q.K^T, scale, "
                      "[padding mask], %s[causal mask], %s",
                      got.c_str(), s.bwd ? "- Stats, " : "", s.bwd ? "exp" : "softmax");
    }
    REFUSE_IF(causal != (int)s.causal || padding != (s.seq_q ? 1 + s.pad2 : 0) || (int)kind.size() != causal + padding,
              CUDNN_STATUS_NOT_SUPPORTED, "the scores before the softmax are not masked causally at most once%s",
              s.seq_q ? " and by the padding mask once" : "");
    // every matmul's dims bounded by the lengths of their roles (by its B operand)
    for (Desc *op : g->ops) {
        if (op->type != D_(OPERATION_MATMUL)) continue;
        const Desc *b = ref(op, A_(OPERATION_MATMUL_BDESC));
        const Desc *m = ref(op, A_(OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC));
        const Desc *n = ref(op, A_(OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC));
        const Desc *k = ref(op, A_(OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC));
        const Desc *want[3] = {nullptr, nullptr, nullptr};
        if (s.seq_q) {
            if (b == s.kt || (s.bwd && b == s.v))  // S = Q K^T, dP = dO V^T
                want[0] = s.seq_q, want[1] = s.seq_kv;
            else if (b == s.dout || b == s.q)  // dV = P^T dO, dK = dS^T Q
                want[0] = s.seq_kv, want[2] = s.seq_q;
            else  // O = P V, dQ = dS K
                want[0] = s.seq_q, want[2] = s.seq_kv;
        }
        REFUSE_IF(m != want[0] || n != want[1] || k != want[2], CUDNN_STATUS_NOT_SUPPORTED,
                  "a matmul's M/N/K overrides are not the sequence lengths of its dims");
    }
    // ragged rows: only with the padding mask, the same offsets on every query-shaped and every
    // kv-shaped tensor, none on Stats and Sum
    s.off_q = s.q->t.ragged, s.off_kv = s.kt->t.ragged;
    // sdpa_support_surface.h: "Ragged offsets are only supported with padding mask."
    REFUSE_IF((s.off_q || s.off_kv) && !s.seq_q, CUDNN_STATUS_NOT_SUPPORTED,
              "ragged offsets: they are only supported with a padding mask");
    // sdpa_support_surface.h: "THD (ragged offset) is only supported in Hopper and above" before 9.18.1
    REFUSE_IF((s.off_q || s.off_kv) && sm() < 90 && version() < 91801, CUDNN_STATUS_NOT_SUPPORTED,
              "ragged offsets: THD (ragged offset) needs Hopper (SM90) before cuDNN 9.18.1 (SM%lld, cuDNN %lld)",
              (long long)sm(), (long long)version());
    // CompositeSDPABackwardNode::pre_validate_node: "For cuDNN version below 9.6.0, group-query
    // attention with ragged offset is not supported"
    REFUSE_IF((s.off_q || s.off_kv) && s.bwd && s.H != s.KV && version() < 90600, CUDNN_STATUS_NOT_SUPPORTED,
              "ragged offsets: group-query attention with ragged offsets needs cuDNN 9.6 in the backward");
    for (Desc *t : {s.o, s.dout, s.dq, s.dq_accum})
        REFUSE_IF(t && t->t.ragged != s.off_q, CUDNN_STATUS_NOT_SUPPORTED, "the query-shaped tensors' ragged offsets differ");
    for (Desc *t : {s.v, s.dk, s.dv})
        REFUSE_IF(t && t->t.ragged != s.off_kv, CUDNN_STATUS_NOT_SUPPORTED, "the kv-shaped tensors' ragged offsets differ");
    for (Desc *op : g->ops)  // backward's K, reshaped from K^T, keeps K's offsets
        if (op->type == D_(OPERATION_RESHAPE) && ref(op, A_(OPERATION_RESHAPE_XDESC)) == s.kt)
            REFUSE_IF(ref(op, A_(OPERATION_RESHAPE_YDESC))->t.ragged != s.off_kv, CUDNN_STATUS_NOT_SUPPORTED,
                      "K reshaped from K^T lost its ragged offsets");
    for (Desc *t : {s.stats, s.sum})
        REFUSE_IF(t && t->t.ragged, CUDNN_STATUS_NOT_SUPPORTED, "the emulation runs dense Stats and Sum only");
    return CUDNN_STATUS_SUCCESS;
}

const char *dt_name(cudnnDataType_t dt) {
    switch (dt) {
    case CUDNN_DATA_FLOAT: return "FLOAT";
    case CUDNN_DATA_HALF: return "HALF";
    case CUDNN_DATA_BFLOAT16: return "BFLOAT16";
    case CUDNN_DATA_INT32: return "INT32";
    case CUDNN_DATA_BOOLEAN: return "BOOLEAN";
    default: return "another type";
    }
}

// What real cuDNN refuses of an SDPA graph whose roles are known, each refusal by name and with
// where the rule is written down (NVIDIA/cudnn-frontend: include/cudnn_frontend/node/
// sdpa_support_surface.h, scaled_dot_product_flash_attention.h, docs/operations/Attention.md).
cudnnStatus_t support_surface(Desc *g, std::map<Desc *, Desc *> &producer) {
    const Sdpa &s = g->sdpa;
    const int64_t v = version(), arch = sm() / 10, hd = s.hd;
    // sdpa_support_surface.h: "SDPA FP16/BF16 requires SM80 (Ampere) or newer architecture";
    // Attention.md, Limitations
    REFUSE_IF(arch < 8, CUDNN_STATUS_NOT_SUPPORTED, "SM80: fused flash attention needs an Ampere (SM80) or newer GPU, "
              "this is SM%lld", (long long)sm());
    // I/O data type: the FP16/BF16 SDPA (mma_core_mode HALF) takes Q, K, V, O and the gradients in
    // one of the two (Attention.md, "Scaled Dot Product Attention FP16/BF16"; FP8 is another node)
    const cudnnDataType_t io = s.q->t.dt;
    REFUSE_IF(io != CUDNN_DATA_BFLOAT16 && io != CUDNN_DATA_HALF, CUDNN_STATUS_NOT_SUPPORTED,
              "I/O data type: Q is %s; fused flash attention takes HALF or BFLOAT16 Q, K, V, O", dt_name(io));
    for (Desc *t : {s.kt, s.v, s.o, s.dout, s.dq, s.dk, s.dv})
        REFUSE_IF(t && t->t.dt != io, CUDNN_STATUS_NOT_SUPPORTED,
                  "I/O data type: tensor %lld is %s, Q is %s (one I/O type for the graph)", (long long)t->t.uid,
                  dt_name(t->t.dt), dt_name(io));
    // head dims: sdpa_support_surface.h, "hidden_dim should be multiple of 8", and the per-
    // architecture limits for cuDNN 9.9 and older (128 on Ampere, 256 on Hopper), 9.8 and older
    // on Blackwell (128)
    REFUSE_IF(hd % 8, CUDNN_STATUS_NOT_SUPPORTED, "head dim: %lld is not a multiple of 8", (long long)hd);
    REFUSE_IF(arch == 8 && v <= 90900 && hd > 128, CUDNN_STATUS_NOT_SUPPORTED,
              "head dim: %lld > 128, the most on Ampere for cuDNN 9.9 and older", (long long)hd);
    REFUSE_IF(arch == 9 && v <= 90900 && hd > 256, CUDNN_STATUS_NOT_SUPPORTED,
              "head dim: %lld > 256, the most on Hopper for cuDNN 9.9 and older", (long long)hd);
    REFUSE_IF(arch == 10 && v < 90900 && hd > 128, CUDNN_STATUS_NOT_SUPPORTED,
              "head dim: %lld > 128, the most on Blackwell for cuDNN 9.8 and older", (long long)hd);
    // Attention.md, Limitations: "The stride of the embedding dimension per head D_qk and D_v for
    // all the tensors above must be 1" (K^T and the backward's V^T carry it in dim 2)
    for (Desc *t : {s.q, s.kt, s.v, s.o, s.dout, s.dq, s.dk, s.dv}) {
        if (!t) continue;
        const bool tr = t == s.kt || (s.bwd && t == s.v);
        REFUSE_IF(t->t.stride[tr ? 2 : 3] != 1, CUDNN_STATUS_NOT_SUPPORTED,
                  "head-dim stride: tensor %lld has stride %lld on the head dim, which must be 1", (long long)t->t.uid,
                  (long long)t->t.stride[tr ? 2 : 3]);
    }
    // The virtual tensors' data types and layouts, as the frontend sets them: the graph's
    // intermediate data type FLOAT for the score chain ("Intermediate tensor data type needs to be
    // set", sdpa_support_surface.h), INT32 indices and BOOLEAN masks (attn_score_modifiers.h,
    // diagonal_band_mask.h), and the I/O type for P before P.V ("Requirement by cudnn backend to
    // take in bmm2 aType as i/o type", CompositeSDPANode), P^T and dS^T (reshape_p, reshape_dS),
    // K from K^T (reshape_k) and the GQA full-head products (dV_fullhead, dK_fullhead)
    // (CompositeSDPABackwardNode); scores packed (b, h, s_q, s_kv), the transposes with the last
    // two strides swapped, row statistics packed (b, h, s_q, 1).
    const Desc *bmm2_a = nullptr;
    for (Desc *op : g->ops) {
        std::vector<Desc *> in;
        Desc *out;
        op_io(op, in, &out);
        if (op->type == D_(OPERATION_MATMUL) && !bmm2_a && !s.bwd && in[1] == s.v) bmm2_a = in[0];
    }
    for (auto &[t, op] : producer) {
        if (!t->t.virt) continue;
        cudnnDataType_t want = CUDNN_DATA_FLOAT;
        const char *what = "a virtual tensor of the score chain (the intermediate data type)";
        if (op->type == D_(OPERATION_POINTWISE)) {
            const cudnnPointwiseMode_t m = pw_mode(op);
            if (m == CUDNN_POINTWISE_GEN_INDEX) want = CUDNN_DATA_INT32, what = "an index";
            if (m == CUDNN_POINTWISE_CMP_GE || m == CUDNN_POINTWISE_CMP_LT || m == CUDNN_POINTWISE_LOGICAL_AND)
                want = CUDNN_DATA_BOOLEAN, what = "a mask";
        }
        if (t == bmm2_a) want = io, what = "P before P.V";
        if (op->type == D_(OPERATION_RESHAPE)) {
            const Desc *x = ref(op, A_(OPERATION_RESHAPE_XDESC));
            want = io, what = x == s.kt ? "K reshaped from K^T" : "P^T (for dV) or dS^T (for dK)";
        }
        auto it = producer.find(in_a(op));
        const bool fullhead = op->type == D_(OPERATION_MATMUL) && it != producer.end() &&
                              it->second->type == D_(OPERATION_RESHAPE);
        const bool od = op->type == D_(OPERATION_POINTWISE) && in_x(op) == s.dout;  // dO * O, (b, h, s_q, d)
        if (fullhead) want = io, what = "a group-query full-head product (dK_fullhead, dV_fullhead)";
        REFUSE_IF(t->t.dt != want, CUDNN_STATUS_NOT_SUPPORTED,
                  "intermediate data type: tensor %lld, %s, is %s; the fused pattern takes %s there", (long long)t->t.uid,
                  what, dt_name(t->t.dt), dt_name(want));
        const Tensor &x = t->t;
        const bool tr = op->type == D_(OPERATION_RESHAPE), k_of_kt = tr && ref(op, A_(OPERATION_RESHAPE_XDESC)) == s.kt;
        if (!fullhead && !od && !k_of_kt && x.dim[1] == s.H && x.dim[2] == (tr ? s.Tk : s.T) &&
            x.dim[3] == (tr ? s.T : s.Tk)) {
            const int64_t want_st[4] = {s.H * s.T * s.Tk, s.T * s.Tk, tr ? 1 : s.Tk, tr ? s.Tk : 1};
            REFUSE_IF(memcmp(x.stride, want_st, sizeof want_st), CUDNN_STATUS_NOT_SUPPORTED,
                      "layout: virtual scores %lld are not (b, h, s_q, s_kv) %s", (long long)x.uid,
                      tr ? "with the last two strides swapped" : "packed");
        }
        if (x.dim[3] == 1 && x.dim[2] == s.T) {
            const int64_t want_st[4] = {s.H * s.T, s.T, 1, 1};
            REFUSE_IF(memcmp(x.stride, want_st, sizeof want_st), CUDNN_STATUS_NOT_SUPPORTED,
                      "layout: virtual row statistics %lld are not packed (b, h, s_q, 1)", (long long)x.uid);
        }
    }
    // the backward's dQ accumulator: FLOAT, packed (b, h, s_q, d), or dQ's strides and ragged
    // offsets (max_total_seq_len_q) (CompositeSDPABackwardNode, dQ_accum)
    if (s.bwd) {
        const Tensor &a = s.dq_accum->t;
        REFUSE_IF(a.dt != CUDNN_DATA_FLOAT || a.virt, CUDNN_STATUS_NOT_SUPPORTED,
                  "dQ accumulator: it is %s%s; the frontend's dQ_accum is a real FLOAT tensor in workspace",
                  a.virt ? "virtual " : "", dt_name(a.dt));
        const int64_t pk[4] = {s.H * s.T * hd, s.T * hd, hd, 1};
        REFUSE_IF(a.ragged ? memcmp(a.stride, s.dq->t.stride, sizeof pk) : memcmp(a.stride, pk, sizeof pk),
                  CUDNN_STATUS_NOT_SUPPORTED, "dQ accumulator layout: not packed (b, h, s_q, d), nor dQ's ragged rows");
    }
    return CUDNN_STATUS_SUCCESS;
}

// Finds the SDPA roles in a finalized graph's operations, or says why this is not an SDPA graph.
cudnnStatus_t recognise(Desc *g) {
    Sdpa &s = g->sdpa;
    s = Sdpa{};
    std::vector<Desc *> mms;
    std::map<Desc *, Desc *> producer;
    bool gen2 = false, gen3 = false, cmp = false;
    for (Desc *op : g->ops) {
        std::vector<Desc *> in;
        Desc *out;
        op_io(op, in, &out);
        producer[out] = op;
    }
    for (Desc *op : g->ops) {
        std::vector<Desc *> in;
        Desc *out;
        op_io(op, in, &out);
        if (op->type == D_(OPERATION_MATMUL)) mms.push_back(op);
        if (op->type != D_(OPERATION_POINTWISE)) continue;
        const cudnnPointwiseMode_t m = pw_mode(op);
        const Desc *pw = ref(op, A_(OPERATION_POINTWISE_PW_DESCRIPTOR));
        if (m == CUDNN_POINTWISE_GEN_INDEX) (*get<int64_t>(pw, A_(POINTWISE_AXIS)) == 2 ? gen2 : gen3) = true;
        if (m == CUDNN_POINTWISE_CMP_GE) cmp = true;
        if (m == CUDNN_POINTWISE_BINARY_SELECT) s.neg_inf = in[1];
        if (m == CUDNN_POINTWISE_MUL && in[1]->t.by_value) {  // the score scale, or softmax_sum's factor
            if (out->t.virt)
                s.scale = in[1];
            else
                s.one = in[1], s.sum = out;
        }
        if (m == CUDNN_POINTWISE_IDENTITY) s.dq_accum = in[0], s.dq = out;
        if (m == CUDNN_POINTWISE_MUL && !in[0]->t.virt && !in[1]->t.virt) s.dout = in[0], s.o = in[1];
        if (m == CUDNN_POINTWISE_ADD && !out->t.virt) s.stats = out;
        if (m == CUDNN_POINTWISE_SUB && !in[1]->t.virt && !producer.count(in[1])) s.stats = in[1];  // not Sum
    }
    REFUSE_IF((gen2 || gen3 || cmp) && !s.neg_inf, CUDNN_STATUS_NOT_SUPPORTED, "indices compared but nothing masked");
    REFUSE_IF(!s.scale, CUDNN_STATUS_NOT_SUPPORTED, "the emulation runs scaled SDPA graphs only (no scale found)");
    auto A = [](Desc *mm) { return ref(mm, A_(OPERATION_MATMUL_ADESC)); };
    auto Bm = [](Desc *mm) { return ref(mm, A_(OPERATION_MATMUL_BDESC)); };
    auto C = [](Desc *mm) { return ref(mm, A_(OPERATION_MATMUL_CDESC)); };
    s.bwd = mms.size() != 2;
    if (!s.bwd) {
        REFUSE_IF(A(mms[0])->t.virt || Bm(mms[0])->t.virt || !A(mms[1])->t.virt || C(mms[1])->t.virt || !s.stats,
                  CUDNN_STATUS_NOT_SUPPORTED, "not the SDPA forward graph");
        s.q = A(mms[0]), s.kt = Bm(mms[0]), s.v = Bm(mms[1]), s.o = C(mms[1]);
    } else {
        REFUSE_IF(!s.dout || !s.stats, CUDNN_STATUS_NOT_SUPPORTED, "not the SDPA backward graph");
        // Sum = reduction of dO * O into a real tensor
        for (Desc *op : g->ops) {
            std::vector<Desc *> in;
            Desc *out;
            op_io(op, in, &out);
            if (op->type == D_(OPERATION_MATMUL) && !in[0]->t.virt && !in[1]->t.virt) {
                if (in[0] == s.dout)
                    s.v = in[1];
                else
                    s.q = in[0], s.kt = in[1];
            }
            if (out->t.virt || (op->type != D_(OPERATION_MATMUL) && op->type != D_(OPERATION_REDUCTION))) continue;
            if (out == s.sum) continue;
            Desc *mm = op->type == D_(OPERATION_MATMUL) ? op : producer[in[0]];  // dK, dV: reduced over groups
            REFUSE_IF(!mm || mm->type != D_(OPERATION_MATMUL), CUDNN_STATUS_NOT_SUPPORTED, "unrecognised gradient");
            Desc *b = Bm(mm);
            if (b == s.dout)
                s.dv = out;
            else if (!b->t.virt)
                s.dk = out;
            else  // dS K: the frontend's dQ_accum, which an IDENTITY copies into dQ
                REFUSE_IF(out != s.dq_accum, CUDNN_STATUS_NOT_SUPPORTED,
                          "dQ: dS K goes into a FLOAT accumulator that an IDENTITY copies into dQ (the frontend's "
                          "dQ_accum, CompositeSDPABackwardNode)");
        }
        REFUSE_IF(!s.q || !s.v || !s.sum || !s.dq || !s.dk || !s.dv || !s.dq_accum, CUDNN_STATUS_NOT_SUPPORTED,
                  "not the SDPA backward graph (a gradient, Sum or the dQ accumulator is missing)");
    }
    s.B = s.q->t.dim[0], s.H = s.q->t.dim[1], s.T = s.q->t.dim[2], s.hd = s.q->t.dim[3], s.KV = s.kt->t.dim[1];
    s.Tk = s.kt->t.dim[3];
    const cudnnStatus_t surface = support_surface(g, producer);
    if (surface != CUDNN_STATUS_SUCCESS) return surface;
    REFUSE_IF(!rows_view(s.v->t, s.bwd), CUDNN_STATUS_NOT_SUPPORTED, "V is not (B, T, heads, hd) rows");
    if (s.bwd)
        REFUSE_IF(!rows_view(s.dout->t, false) || !rows_view(s.dq->t, false) || !rows_view(s.dk->t, false) ||
                      !rows_view(s.dv->t, false),
                  CUDNN_STATUS_NOT_SUPPORTED, "a backward operand is not (B, T, heads, hd) rows");
    REFUSE_IF(!rows_view(s.q->t, false, &s.Sq) || !rows_view(s.kt->t, true, &s.Sk) || !rows_view(s.o->t, false),
              CUDNN_STATUS_NOT_SUPPORTED, "Q, K or O is not (B, T, heads, hd) rows");
    // one memory layout per role: the query-shaped tensors' rows alike, the kv-shaped ones' alike
    for (Desc *t : {s.o, s.dout, s.dq})
        REFUSE_IF(t && t->t.stride[0] != s.q->t.stride[0], CUDNN_STATUS_NOT_SUPPORTED,
                  "the emulation runs query-shaped tensors of one batch stride only");
    for (Desc *t : {s.v, s.dk, s.dv})
        REFUSE_IF(t && t->t.stride[0] != s.kt->t.stride[0], CUDNN_STATUS_NOT_SUPPORTED,
                  "the emulation runs kv-shaped tensors of one batch stride only");
    REFUSE_IF(s.v->t.dim[s.bwd ? 3 : 2] != s.Tk, CUDNN_STATUS_NOT_SUPPORTED, "K and V hold different key counts");
    // (the head-dim strides and I/O types are checked in support_surface, before these layouts)
    const int64_t rows[4] = {s.B, s.H, s.T, 1}, rows_stride[4] = {s.H * s.T, s.T, 1, 1};
    // Stats and softmax_sum: FLOAT (b, h, s_q, 1) with strides (h s_q, s_q, 1, 1)
    // (SDPANodeBase::infer_properties_node for Stats; CompositeSDPABackwardNode for softmax_sum)
    for (Desc *t : {s.stats, s.sum}) {
        if (!t) continue;
        const char *name = t == s.stats ? "Stats" : "softmax_sum";
        REFUSE_IF(t->t.dt != CUDNN_DATA_FLOAT, CUDNN_STATUS_NOT_SUPPORTED,
                  "%s data type: it is %s, the softmax statistics are FLOAT", name, dt_name(t->t.dt));
        REFUSE_IF(memcmp(t->t.dim, rows, sizeof rows) || memcmp(t->t.stride, rows_stride, sizeof rows_stride),
                  CUDNN_STATUS_NOT_SUPPORTED, "%s layout: dims or strides are not (b, h, s_q, 1) / (h s_q, s_q, 1, 1)",
                  name);
    }
    return recognise_masks(g, producer);
}

cudnnStatus_t finalize_graph(Desc *g) {
    const int64_t n = count(g, A_(OPERATIONGRAPH_OPS));
    Desc *const *ops = get<Desc *>(g, A_(OPERATIONGRAPH_OPS));
    std::map<Desc *, int> made, used;
    std::map<int64_t, Desc *> uids;
    for (int64_t i = 0; i < n; i++) {
        REFUSE_IF(!is_op(ops[i]), CUDNN_STATUS_BAD_PARAM, "operation graph: entry %lld is not an operation", (long long)i);
        g->ops.push_back(ops[i]);
        std::vector<Desc *> in;
        Desc *out;
        op_io(ops[i], in, &out);
        made[out]++;
        for (Desc *t : in) used[t]++;
        in.push_back(out);
        for (size_t j = 0, nt = in.size(); j < nt; j++)  // a tensor's ragged offsets are the graph's too
            if (in[j]->t.ragged) in.push_back(in[j]->t.ragged);
        for (Desc *t : in) {
            auto it = uids.emplace(t->t.uid, t).first;
            REFUSE_IF(it->second != t, CUDNN_STATUS_BAD_PARAM, "two tensors have UID %lld", (long long)t->t.uid);
        }
    }
    for (auto &[uid, t] : uids) {
        REFUSE_IF(made[t] > 1, CUDNN_STATUS_BAD_PARAM, "tensor %lld is written by %d operations", (long long)uid, made[t]);
        REFUSE_IF(t->t.virt && (!made[t] || !used[t]), CUDNN_STATUS_BAD_PARAM, "virtual tensor %lld is %s",
                  (long long)uid, made[t] ? "never used" : "never made");
    }
    return recognise(g);
}

cudnnStatus_t finalize(Desc *d) {
    for (const Rule &r : rules)
        if (r.d == d->type && r.required)
            REFUSE_IF(!d->attrs.count(r.a), CUDNN_STATUS_BAD_PARAM, "descriptor type %d: attribute %d not set",
                      (int)d->type, (int)r.a);
    switch (d->type) {
    case D_(TENSOR): return finalize_tensor(d);
    case D_(POINTWISE): {
        const bool gen = *get<cudnnPointwiseMode_t>(d, A_(POINTWISE_MODE)) == CUDNN_POINTWISE_GEN_INDEX;
        REFUSE_IF(gen != !!d->attrs.count(A_(POINTWISE_AXIS)), CUDNN_STATUS_BAD_PARAM,
                  "pointwise: an axis goes with GEN_INDEX only, and it needs one");
        return CUDNN_STATUS_SUCCESS;
    }
    case D_(OPERATIONGRAPH): return finalize_graph(d);
    case D_(ENGINEHEUR):
        d->graph = ref(d, A_(ENGINEHEUR_OPERATION_GRAPH));
        REFUSE_IF(d->graph->type != D_(OPERATIONGRAPH), CUDNN_STATUS_BAD_PARAM, "heuristics of a non-graph");
        return CUDNN_STATUS_SUCCESS;
    case D_(EXECUTION_PLAN): {
        const Desc *cfg = ref(d, A_(EXECUTION_PLAN_ENGINE_CONFIG));
        REFUSE_IF(cfg->type != D_(ENGINECFG) || !cfg->graph, CUDNN_STATUS_BAD_PARAM, "plan of an unset engine config");
        REFUSE_IF(mode_is("nofinalize"), CUDNN_STATUS_NOT_SUPPORTED, "FSDPC_EMU_CUDNN=nofinalize: no plan");
        d->graph = cfg->graph;
        plans_built++;
        return CUDNN_STATUS_SUCCESS;
    }
    case D_(VARIANT_PACK):
        REFUSE_IF(count(d, A_(VARIANT_PACK_UNIQUE_IDS)) != count(d, A_(VARIANT_PACK_DATA_POINTERS)),
                  CUDNN_STATUS_BAD_PARAM, "variant pack: as many UIDs as pointers");
        return CUDNN_STATUS_SUCCESS;
    default: return is_op(d) ? finalize_op(d) : CUDNN_STATUS_SUCCESS;
    }
}

// ---- executing the SDPA graphs ----
std::vector<float> load(const Desc *t, const void *p) {
    const size_t n = (size_t)elems(t->t);
    std::vector<float> f(n);
    if (t->t.dt == CUDNN_DATA_FLOAT) {
        emu_op_copy(f.data(), p, n * 4, 1);
        return f;
    }
    std::vector<uint16_t> h(n);
    emu_op_copy(h.data(), p, n * 2, 1);
    cpu_bf16_to_f32(f.data(), h.data(), n);
    return f;
}
void store(const Desc *t, void *p, const std::vector<float> &f) {
    const size_t n = f.size();
    if (t->t.dt == CUDNN_DATA_FLOAT) {
        emu_op_copy(p, f.data(), n * 4, 0);
        return;
    }
    std::vector<uint16_t> h(n);
    cpu_f32_to_bf16(h.data(), f.data(), n);
    emu_op_copy(p, h.data(), n * 2, 0);
}

// the row log-sum-exp of the scaled causal scores
std::vector<float> lse_of(const Sdpa &s, const std::vector<float> &q, const std::vector<float> &k, float scale) {
    std::vector<float> lse(s.B * s.H * s.T);
    std::vector<double> sc(s.T);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.H; h++)
            for (int64_t t = 0; t < s.T; t++) {
                double mx = -INFINITY, sum = 0.0;
                const float *qr = &q[((b * s.T + t) * s.H + h) * s.hd];
                for (int64_t j = 0; j <= t; j++) {
                    const float *kr = &k[((b * s.T + j) * s.KV + h / (s.H / s.KV)) * s.hd];
                    double dot = 0.0;
                    for (int64_t d = 0; d < s.hd; d++) dot += (double)qr[d] * kr[d];
                    sc[j] = dot * scale, mx = fmax(mx, sc[j]);
                }
                for (int64_t j = 0; j <= t; j++) sum += exp(sc[j] - mx);
                lse[(b * s.H + h) * s.T + t] = (float)(mx + log(sum));
            }
    return lse;
}

// n elements of a tensor from element offset off, as floats (bf16 or fp32), and back
std::vector<float> load_span(const Desc *t, const void *p, size_t off, size_t n) {
    const size_t eb = dt_bytes(t->t.dt);
    std::vector<float> f(n);
    if (eb == 4) {
        emu_op_copy(f.data(), (const char *)p + off * 4, n * 4, 1);
        return f;
    }
    std::vector<uint16_t> h(n);
    emu_op_copy(h.data(), (const char *)p + off * 2, n * 2, 1);
    cpu_bf16_to_f32(f.data(), h.data(), n);
    return f;
}
void store_span(const Desc *t, void *p, size_t off, const std::vector<float> &f) {
    const size_t n = f.size();
    if (dt_bytes(t->t.dt) == 4) {
        emu_op_copy((char *)p + off * 4, f.data(), n * 4, 0);
        return;
    }
    std::vector<uint16_t> h(n);
    cpu_f32_to_bf16(h.data(), f.data(), n);
    emu_op_copy((char *)p + off * 2, h.data(), n * 2, 0);
}
std::vector<int32_t> load_i32(const Desc *t, const void *p) {
    std::vector<int32_t> v((size_t)elems(t->t));
    emu_op_copy(v.data(), p, v.size() * 4, 1);
    return v;
}

// How the real library corrupts a backward it accepts, version by version (the frontend guards
// each; NVIDIA/cudnn-frontend include/cudnn_frontend/node/scaled_dot_product_flash_attention.h,
// CompositeSDPABackwardNode):
// dQ leaves through the FLOAT accumulator of one batch entry (element offset base, L rows; dq its
// (L, H, hd) rows): before cuDNN 9.6 the library adds into what the accumulator holds, which the
// frontend zeroes before every execution (collect_tensors_in_workspace_node); later it zeroes it
// itself
void through_accum(const Sdpa &s, void *p, size_t base, int64_t L, float *dq) {
    const Tensor &a = s.dq_accum->t;
    const int64_t H = s.H, hd = s.hd;
    const size_t span = (size_t)((H - 1) * a.stride[1] + (L - 1) * a.stride[2] + (hd - 1) * a.stride[3] + 1);
    std::vector<float> acc = load_span(s.dq_accum, p, base, span);
    const bool adds = version() < 90600;
    for (int64_t t = 0; t < L; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < hd; d++) {
                float &x = acc[(size_t)(h * a.stride[1] + t * a.stride[2] + d * a.stride[3])];
                float &y = dq[(t * H + h) * hd + d];
                x = (adds ? x : 0.0f) + y;
                y = x;
            }
    store_span(s.dq_accum, p, base, acc);
}
// up to cuDNN 9.15.0, a backward without a padding mask whose s_kv is not a multiple of 128 (the
// frontend adds one: pre_validate_node's "workaround padding mask"): garbage past the last whole
// 128-row block, here in every gradient of one batch entry ((T, heads, hd) rows each)
bool breaks_unpadded(const Sdpa &s) { return s.bwd && !s.seq_q && s.Tk % 128 && version() <= 91500; }
void garbage_past_128(const Sdpa &s, float *dq, float *dk, float *dv) {
    for (int64_t t = s.T / 128 * 128; t < s.T; t++) {
        for (int64_t i = 0; i < s.H * s.hd; i++) dq[t * s.H * s.hd + i] += 1.0f;
        for (int64_t i = 0; i < s.KV * s.hd; i++) dk[t * s.KV * s.hd + i] += 1.0f, dv[t * s.KV * s.hd + i] -= 1.0f;
    }
}
// from cuDNN 9.0 to 9.9, a padding-masked backward without the padding mask again after - Stats
// (expand_node's "2nd_padding"): dK and dV wrong
bool breaks_one_padding(const Sdpa &s) {
    return s.bwd && s.seq_q && !s.pad2 && version() >= 90000 && version() < 91000;
}

// A document-masked graph: batch entry i is a sequence of seq_len tokens whose (tokens, heads, hd)
// rows start at element offset off[i] (ragged) or i * the batch stride, run on the CPU on its own.
// Stats (and Sum) rows past seq_len, and the rows of tensors past it, are not written.
cudnnStatus_t run_sdpa_docs(const Sdpa &s, const std::map<int64_t, void *> &ptr, float scale, float off) {
    auto at = [&](const Desc *t) { return ptr.at(t->t.uid); };
    const int64_t B = s.B, T = s.T, H = s.H, KV = s.KV, hd = s.hd;
    const std::vector<int32_t> sq = load_i32(s.seq_q, at(s.seq_q)), skv = load_i32(s.seq_kv, at(s.seq_kv));
    std::vector<int32_t> oq, okv;
    if (s.off_q) oq = load_i32(s.off_q, at(s.off_q));
    if (s.off_kv) okv = load_i32(s.off_kv, at(s.off_kv));
    const int64_t qrow = H * hd, kvrow = KV * hd;
    for (int64_t i = 0; i < B; i++) {
        REFUSE_IF(sq[i] != skv[i], CUDNN_STATUS_NOT_SUPPORTED, "entry %lld: the emulation runs seq_len_q == seq_len_kv only",
                  (long long)i);
        REFUSE_IF(sq[i] < 0 || sq[i] > T, CUDNN_STATUS_EXECUTION_FAILED, "entry %lld: seq_len %d outside 0..%lld",
                  (long long)i, sq[i], (long long)T);
        for (const std::vector<int32_t> *o : {&oq, &okv}) {
            if (o->empty()) continue;
            const int64_t row = o == &oq ? qrow : kvrow;
            REFUSE_IF((*o)[i] < 0 || (int64_t)(*o)[i] + sq[i] * row > (*o)[i + 1], CUDNN_STATUS_EXECUTION_FAILED,
                      "entry %lld: ragged offsets %d, %d do not hold %d rows of %lld elements", (long long)i, (*o)[i],
                      (*o)[i + 1], sq[i], (long long)row);
        }
    }
    const Tensor &st = s.stats->t;
    for (int64_t i = 0; i < B; i++) {
        const int L = sq[i];
        if (!L) continue;
        const size_t bq = oq.empty() ? (size_t)(i * s.q->t.stride[0]) : (size_t)oq[i];
        const size_t bkv = okv.empty() ? (size_t)(i * s.kt->t.stride[0]) : (size_t)okv[i];
        const size_t nq = (size_t)L * qrow, nkv = (size_t)L * kvrow;
        std::vector<float> q = load_span(s.q, at(s.q), bq, nq), k = load_span(s.kt, at(s.kt), bkv, nkv);
        std::vector<float> v = load_span(s.v, at(s.v), bkv, nkv), out(nq), probs(cpu_attention_saved_floats(1, H, L, L));
        Sdpa one = s;
        one.B = 1, one.T = L;
        const std::vector<float> lse = lse_of(one, q, k, scale);
        auto stat_at = [&](int64_t h, int64_t t) { return (size_t)(i * st.stride[0] + h * st.stride[1] + t * st.stride[2]); };
        if (!s.bwd) {
            cpu_attention_fwd(out.data(), probs.data(), q.data(), k.data(), v.data(), 1, L, L, H, KV, hd, nkv, nullptr, 0,
                              nullptr);
            for (float &x : out) x += off;
            store_span(s.o, at(s.o), bq, out);
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < L; t++) store_span(s.stats, at(s.stats), stat_at(h, t), {lse[h * L + t]});
            continue;
        }
        std::vector<float> o = load_span(s.o, at(s.o), bq, nq), dout = load_span(s.dout, at(s.dout), bq, nq);
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < L; t++) {
                const float got = load_span(s.stats, at(s.stats), stat_at(h, t), 1)[0], want = lse[h * L + t];
                REFUSE_IF(!(fabsf(got - want) <= 2e-2f * (1.0f + fabsf(want))), CUDNN_STATUS_EXECUTION_FAILED,
                          "entry %lld: Stats row (%lld, %lld) is %g, but the forward's log-sum-exp is %g", (long long)i,
                          (long long)h, (long long)t, got, want);
                double acc = 0.0;
                for (int64_t d = 0; d < hd; d++) acc += (double)dout[(t * H + h) * hd + d] * o[(t * H + h) * hd + d];
                store_span(s.sum, at(s.sum), stat_at(h, t), {(float)acc});
            }
        cpu_attention_fwd(out.data(), probs.data(), q.data(), k.data(), v.data(), 1, L, L, H, KV, hd, nkv, nullptr, 0,
                          nullptr);
        std::vector<float> dq(nq), dk(nkv), dv(nkv), scratch(cpu_attention_scratch_floats(1, H, L));
        cpu_attention_bwd(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), o.data(), probs.data(),
                          q.data(), k.data(), v.data(), 1, L, H, KV, hd, nullptr, 0, nullptr);
        if (breaks_one_padding(s))
            for (size_t j = 0; j < nkv; j++) dk[j] += 1.0f, dv[j] -= 1.0f;
        through_accum(s, at(s.dq_accum), s.dq_accum->t.ragged ? (size_t)oq[i] : (size_t)(i * s.dq_accum->t.stride[0]),
                      L, dq.data());
        for (float &x : dq) x += off;
        store_span(s.dq, at(s.dq), bq, dq);
        store_span(s.dk, at(s.dk), bkv, dk);
        store_span(s.dv, at(s.dv), bkv, dv);
    }
    doc_execs++;
    return CUDNN_STATUS_SUCCESS;
}

// A ring block: queries against keys of another count, a full rectangle, or rows of a longer
// sequence in memory (whole-sequence graphs are none of these).
bool is_block(const Sdpa &s) { return !s.causal || s.Tk != s.T || s.Sq != s.T || s.Sk != s.Tk; }

// a view's rows, entry by entry: T of each entry's S rows of width w are contiguous
std::vector<float> load_rows(const Desc *t, const void *p, int64_t B, int64_t T, int64_t S, int64_t w) {
    std::vector<float> f;
    for (int64_t b = 0; b < B; b++) {
        const std::vector<float> e = load_span(t, p, (size_t)(b * S * w), (size_t)(T * w));
        f.insert(f.end(), e.begin(), e.end());
    }
    return f;
}
void store_rows(const Desc *t, void *p, int64_t B, int64_t T, int64_t S, int64_t w, const std::vector<float> &f) {
    for (int64_t b = 0; b < B; b++)
        store_span(t, p, (size_t)(b * S * w), std::vector<float>(f.begin() + b * T * w, f.begin() + (b + 1) * T * w));
}

// Any SDPA graph without documents by the formulas, in double: the forward's O and Stats; the
// backward's gradients from the Stats it is given (P = exp(scale Q K^T - Stats)), which may be a
// log-sum-exp over more keys than these (a ring's merged one: the block's share of the gradients).
// The version rules' corruptions apply as in run_sdpa; a padding mask must keep every row.
cudnnStatus_t run_block(const Sdpa &s, const std::map<int64_t, void *> &ptr, float scale) {
    auto at = [&](const Desc *t) { return ptr.at(t->t.uid); };
    const int64_t B = s.B, Tq = s.T, Tk = s.Tk, H = s.H, KV = s.KV, hd = s.hd, g = H / KV;
    if (s.seq_q) {
        const std::vector<int32_t> sq = load_i32(s.seq_q, at(s.seq_q)), skv = load_i32(s.seq_kv, at(s.seq_kv));
        for (int64_t b = 0; b < B; b++)
            REFUSE_IF(sq[b] != Tq || skv[b] != Tk, CUDNN_STATUS_NOT_SUPPORTED,
                      "entry %lld: the emulation runs padding masks of whole blocks only (%d, %d)", (long long)b, sq[b],
                      skv[b]);
    }
    const float off = mode_is("wrong") ? 0.25f : 0.0f;
    const std::vector<float> q = load_rows(s.q, at(s.q), B, Tq, s.Sq, H * hd), k = load_rows(s.kt, at(s.kt), B, Tk, s.Sk, KV * hd);
    const std::vector<float> v = load_rows(s.v, at(s.v), B, Tk, s.Sk, KV * hd);
    auto score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
        double d = 0.0;
        const float *qr = &q[((b * Tq + i) * H + h) * hd], *kr = &k[((b * Tk + j) * KV + h / g) * hd];
        for (int64_t e = 0; e < hd; e++) d += (double)qr[e] * kr[e];
        return d * scale;
    };
    const int64_t kend_of = Tk;  // causal: query i sees keys 0..i
    auto kend = [&](int64_t i) { return s.causal ? i + 1 : kend_of; };
    std::vector<double> p(Tk);
    block_execs++;
    if (!s.bwd) {
        std::vector<float> o(q.size()), st((size_t)(B * H * Tq));
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < Tq; i++) {
                    double mx = -INFINITY, l = 0.0;
                    for (int64_t j = 0; j < kend(i); j++) p[j] = score(b, h, i, j), mx = fmax(mx, p[j]);
                    for (int64_t j = 0; j < kend(i); j++) p[j] = exp(p[j] - mx), l += p[j];
                    for (int64_t e = 0; e < hd; e++) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < kend(i); j++) acc += p[j] * v[((b * Tk + j) * KV + h / g) * hd + e];
                        o[((b * Tq + i) * H + h) * hd + e] = (float)(acc / l) + off;
                    }
                    st[(b * H + h) * Tq + i] = (float)(mx + log(l));
                }
        store_rows(s.o, at(s.o), B, Tq, s.Sq, H * hd, o);
        store(s.stats, at(s.stats), st);
        return CUDNN_STATUS_SUCCESS;
    }
    const std::vector<float> o = load_rows(s.o, at(s.o), B, Tq, s.Sq, H * hd);
    const std::vector<float> dout = load_rows(s.dout, at(s.dout), B, Tq, s.Sq, H * hd), st = load(s.stats, at(s.stats));
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), sum(st.size());
    std::vector<double> dkd(k.size()), dvd(v.size());
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const size_t qi = (size_t)((b * Tq + i) * H + h) * hd, si = (size_t)((b * H + h) * Tq + i);
                double d = 0.0;
                for (int64_t e = 0; e < hd; e++) d += (double)dout[qi + e] * o[qi + e];
                sum[si] = (float)d;
                for (int64_t j = 0; j < kend(i); j++) {
                    const size_t kj = (size_t)((b * Tk + j) * KV + h / g) * hd;
                    const double pij = exp(score(b, h, i, j) - st[si]);
                    double dp = 0.0;
                    for (int64_t e = 0; e < hd; e++) dp += (double)dout[qi + e] * v[kj + e];
                    const double ds = pij * (dp - d) * scale;
                    for (int64_t e = 0; e < hd; e++) {
                        dvd[kj + e] += pij * dout[qi + e];
                        dkd[kj + e] += ds * q[qi + e];
                        dq[qi + e] += (float)(ds * k[kj + e]);
                    }
                }
            }
    for (size_t i = 0; i < dk.size(); i++) dk[i] = (float)dkd[i], dv[i] = (float)dvd[i];
    store(s.sum, at(s.sum), sum);
    if (breaks_one_padding(s))
        for (size_t j = 0; j < dk.size(); j++) dk[j] += 1.0f, dv[j] -= 1.0f;
    for (int64_t b = 0; b < B; b++) {
        float *dqb = &dq[(size_t)(b * Tq * H * hd)];
        if (breaks_unpadded(s))  // rows past the last whole 128 keys
            for (int64_t j = Tk / 128 * 128; j < Tk; j++)
                for (int64_t e = 0; e < KV * hd; e++) dk[(size_t)((b * Tk + j) * KV * hd + e)] += 1.0f;
        through_accum(s, at(s.dq_accum), (size_t)(b * s.dq_accum->t.stride[0]), Tq, dqb);
    }
    for (float &x : dq) x += off;
    store_rows(s.dq, at(s.dq), B, Tq, s.Sq, H * hd, dq);
    store_rows(s.dk, at(s.dk), B, Tk, s.Sk, KV * hd, dk);
    store_rows(s.dv, at(s.dv), B, Tk, s.Sk, KV * hd, dv);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t run_sdpa(const Sdpa &s, const std::map<int64_t, void *> &ptr) {
    auto at = [&](const Desc *t) { return ptr.at(t->t.uid); };
    const float scale = *(const float *)at(s.scale), neg_inf = s.neg_inf ? *(const float *)at(s.neg_inf) : -INFINITY;
    REFUSE_IF(fabsf(scale - 1.0f / sqrtf((float)s.hd)) > 1e-7f || neg_inf > -1e30f, CUDNN_STATUS_NOT_SUPPORTED,
              "the emulation runs scale 1/sqrt(hd) and masked scores of -inf or close only (got %g, %g)", scale,
              neg_inf);
    if (s.seq_q && !s.off_q && is_block(s)) return run_block(s, ptr, scale);
    if (s.seq_q) return run_sdpa_docs(s, ptr, scale, mode_is("wrong") ? 0.25f : 0.0f);
    if (is_block(s)) return run_block(s, ptr, scale);
    const int B = (int)s.B, T = (int)s.T, H = (int)s.H, KV = (int)s.KV, hd = (int)s.hd;
    const size_t kvb = (size_t)T * KV * hd;
    std::vector<float> q = load(s.q, at(s.q)), k = load(s.kt, at(s.kt)), v = load(s.v, at(s.v));
    std::vector<float> out(q.size()), probs(cpu_attention_saved_floats(B, H, T, T));
    const float off = mode_is("wrong") ? 0.25f : 0.0f;
    if (!s.bwd) {
        cpu_attention_fwd(out.data(), probs.data(), q.data(), k.data(), v.data(), B, T, T, H, KV, hd, kvb, nullptr, 0, nullptr);
        for (float &x : out) x += off;
        store(s.o, at(s.o), out);
        store(s.stats, at(s.stats), lse_of(s, q, k, scale));
        return CUDNN_STATUS_SUCCESS;
    }
    std::vector<float> o = load(s.o, at(s.o)), dout = load(s.dout, at(s.dout)), stats = load(s.stats, at(s.stats));
    const std::vector<float> lse = lse_of(s, q, k, scale);
    for (size_t i = 0; i < lse.size(); i++) {
        REFUSE_IF(!(stats[i] - lse[i] >= -2e-2f * (1.0f + fabsf(lse[i]))), CUDNN_STATUS_EXECUTION_FAILED,
                  "Stats row %zu is %g, below the forward's log-sum-exp %g (of these keys or more)", i, stats[i], lse[i]);
        if (!(fabsf(stats[i] - lse[i]) <= 2e-2f * (1.0f + fabsf(lse[i]))))  // a ring's merged one: exact formulas
            return run_block(s, ptr, scale);
    }
    std::vector<float> sum(stats.size());
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                double acc = 0.0;
                for (int d = 0; d < hd; d++) acc += (double)dout[((size_t)(b * T + t) * H + h) * hd + d] *
                                                    o[((size_t)(b * T + t) * H + h) * hd + d];
                sum[((size_t)b * H + h) * T + t] = (float)acc;
            }
    store(s.sum, at(s.sum), sum);
    cpu_attention_fwd(out.data(), probs.data(), q.data(), k.data(), v.data(), B, T, T, H, KV, hd, kvb, nullptr, 0, nullptr);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), scratch(cpu_attention_scratch_floats(B, H, T));
    cpu_attention_bwd(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), o.data(), probs.data(), q.data(),
                      k.data(), v.data(), B, T, H, KV, hd, nullptr, 0, nullptr);
    for (int b = 0; b < B; b++) {
        const size_t qb = (size_t)b * T * H * hd;
        if (breaks_unpadded(s)) garbage_past_128(s, &dq[qb], &dk[b * kvb], &dv[b * kvb]);
        through_accum(s, at(s.dq_accum), (size_t)(b * s.dq_accum->t.stride[0]), T, &dq[qb]);
    }
    for (float &x : dq) x += off;
    store(s.dq, at(s.dq), dq);
    store(s.dk, at(s.dk), dk);
    store(s.dv, at(s.dv), dv);
    return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

int emu_cudnn_plans_built(void) { return plans_built; }
int emu_cudnn_doc_execs(void) { return doc_execs; }
int emu_cudnn_block_execs(void) { return block_execs; }

// FSDPC_EMU_CUDNN_COUNTS=FILE: the counts written there at exit, so that a whole-program test
// can tell that cuDNN ran its document-masked calls
static void write_counts(void) {
    FILE *f = fopen(getenv("FSDPC_EMU_CUDNN_COUNTS"), "w");
    if (!f) return;
    fprintf(f, "plans %d document-masked executions %d ring-block executions %d\n", plans_built, doc_execs, block_execs);
    fclose(f);
}
__attribute__((constructor)) static void count_at_exit(void) {
    if (getenv("FSDPC_EMU_CUDNN_COUNTS")) atexit(write_counts);
}

size_t cudnnGetVersion(void) { return (size_t)version(); }

const char *cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_INTERNAL_ERROR";
    }
}

void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (!max_size) return;
    snprintf(message, max_size, "%s", last_error);
    last_error[0] = 0;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *h) {
    *h = (cudnnHandle_t)&live;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    REFUSE_IF(h != (cudnnHandle_t)&live, CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a handle");
    exec_stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d) {
    Desc *n = new Desc;
    n->type = t;
    live.insert(n);
    *d = (cudnnBackendDescriptor_t)n;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
    REFUSE_IF(!live.erase((Desc *)d), CUDNN_STATUS_BAD_PARAM, "destroying a descriptor twice or never made");
    delete (Desc *)d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t dd, cudnnBackendAttributeName_t a,
                                       cudnnBackendAttributeType_t t, int64_t n, const void *v) {
    Desc *d = (Desc *)dd;
    REFUSE_IF(!live.count(d), CUDNN_STATUS_BAD_PARAM, "set attribute %d on no descriptor", (int)a);
    REFUSE_IF(d->final, CUDNN_STATUS_BAD_PARAM, "set attribute %d on a finalized descriptor", (int)a);
    const Rule *r = nullptr;
    for (const Rule &x : rules)
        if (x.d == d->type && x.a == a) r = &x;
    REFUSE_IF(!r, CUDNN_STATUS_BAD_PARAM, "descriptor type %d has no attribute %d", (int)d->type, (int)a);
    REFUSE_IF(r->t != t || n < r->min || n > r->max || !v, CUDNN_STATUS_BAD_PARAM,
              "attribute %d: type %d x %lld, expected type %d x %lld..%lld", (int)a, (int)t, (long long)n, (int)r->t,
              (long long)r->min, (long long)r->max);
    if (t == T_(BACKEND_DESCRIPTOR))
        for (int64_t i = 0; i < n; i++) {
            Desc *x = ((Desc *const *)v)[i];
            REFUSE_IF(!live.count(x) || !x->final, CUDNN_STATUS_BAD_PARAM, "attribute %d: descriptor %lld %s", (int)a,
                      (long long)i, live.count(x) ? "not finalized" : "does not exist");
        }
    if (t == T_(HANDLE)) REFUSE_IF(*(void *const *)v != &live, CUDNN_STATUS_BAD_PARAM, "attribute %d: not a handle", (int)a);
    const char *p = (const char *)v;
    d->attrs[a] = Attr{t, std::vector<char>(p, p + elem_bytes(t) * n), n};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const dd, cudnnBackendAttributeName_t a,
                                       cudnnBackendAttributeType_t t, int64_t requested, int64_t *n, void *v) {
    Desc *d = (Desc *)dd;
    REFUSE_IF(!live.count(d) || !d->final, CUDNN_STATUS_BAD_PARAM, "get attribute %d of an unfinalized descriptor",
              (int)a);
    if (d->type == D_(ENGINEHEUR) && a == A_(ENGINEHEUR_RESULTS) && t == T_(BACKEND_DESCRIPTOR)) {
        *n = 1;  // one engine
        if (requested < 1) return CUDNN_STATUS_SUCCESS;
        Desc *cfg = ((Desc **)v)[0];
        REFUSE_IF(!live.count(cfg) || cfg->type != D_(ENGINECFG) || cfg->final, CUDNN_STATUS_BAD_PARAM,
                  "heuristic results go into fresh engine config descriptors");
        cfg->graph = d->graph, cfg->final = true;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == D_(EXECUTION_PLAN) && a == A_(EXECUTION_PLAN_WORKSPACE_SIZE) && t == T_(INT64) && requested == 1) {
        *n = 1;
        *(int64_t *)v = 4096;  // a workspace, so that its plumbing runs
        return CUDNN_STATUS_SUCCESS;
    }
    return refuse(CUDNN_STATUS_NOT_SUPPORTED, "get attribute %d of descriptor type %d", (int)a, (int)d->type);
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t dd) {
    Desc *d = (Desc *)dd;
    REFUSE_IF(!live.count(d) || d->final, CUDNN_STATUS_BAD_PARAM, "finalizing %s", live.count(d) ? "twice" : "nothing");
    const cudnnStatus_t s = finalize(d);
    d->final = s == CUDNN_STATUS_SUCCESS;
    return s;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
    const Desc *p = (const Desc *)plan, *vp = (const Desc *)pack;
    REFUSE_IF(h != (cudnnHandle_t)&live || !live.count((Desc *)p) || !live.count((Desc *)vp) || !p->final ||
                  !vp->final || p->type != D_(EXECUTION_PLAN) || vp->type != D_(VARIANT_PACK),
              CUDNN_STATUS_BAD_PARAM, "execute: not a finalized plan and variant pack");
    const Sdpa &s = p->graph->sdpa;
    const int64_t n = count(vp, A_(VARIANT_PACK_UNIQUE_IDS));
    const int64_t *uids = get<int64_t>(vp, A_(VARIANT_PACK_UNIQUE_IDS));
    void *const *ptrs = get<void *>(vp, A_(VARIANT_PACK_DATA_POINTERS));
    void *ws = *get<void *>(vp, A_(VARIANT_PACK_WORKSPACE));
    REFUSE_IF(!ws || !emu_is_dev(ws), CUDNN_STATUS_BAD_PARAM, "execute: the plan needs device workspace");
    std::map<int64_t, void *> ptr;
    for (int64_t i = 0; i < n; i++) REFUSE_IF(!ptr.emplace(uids[i], ptrs[i]).second, CUDNN_STATUS_BAD_PARAM, "UID %lld twice", (long long)uids[i]);
    std::set<int64_t> want;
    for (const Desc *op : p->graph->ops) {
        std::vector<Desc *> in;
        Desc *out;
        op_io(op, in, &out);
        in.push_back(out);
        for (size_t j = 0, nt = in.size(); j < nt; j++)
            if (in[j]->t.ragged) in.push_back(in[j]->t.ragged);
        for (const Desc *t : in) {
            if (t->t.virt) continue;
            want.insert(t->t.uid);
            auto it = ptr.find(t->t.uid);
            REFUSE_IF(it == ptr.end() || !it->second, CUDNN_STATUS_BAD_PARAM, "the variant pack has no UID %lld",
                      (long long)t->t.uid);
            REFUSE_IF(t->t.by_value ? emu_is_dev(it->second) : !emu_is_dev(it->second) ||
                                                                    (uintptr_t)it->second % t->t.align,
                      CUDNN_STATUS_BAD_PARAM, "UID %lld: %s", (long long)t->t.uid,
                      t->t.by_value ? "a by-value scalar lives in host memory" : "not aligned device memory");
        }
    }
    REFUSE_IF(want.size() != ptr.size(), CUDNN_STATUS_BAD_PARAM, "the variant pack has UIDs the graph does not use");
    EmuOp op(emu_sid(exec_stream), "cudnnBackendExecute");
    return run_sdpa(s, ptr);
}

// the library emu_dlopen hands out as libcudnn.so.9
__attribute__((constructor)) static void register_cudnn(void) {
    static const EmuSym syms[] = {
#define EMU_SYM(f) {#f, (void *)&f},
        EMU_SYM(cudnnGetVersion) EMU_SYM(cudnnGetErrorString) EMU_SYM(cudnnGetLastErrorString) EMU_SYM(cudnnCreate) EMU_SYM(cudnnSetStream)
            EMU_SYM(cudnnBackendCreateDescriptor) EMU_SYM(cudnnBackendDestroyDescriptor)
                EMU_SYM(cudnnBackendSetAttribute) EMU_SYM(cudnnBackendGetAttribute) EMU_SYM(cudnnBackendFinalize)
                    EMU_SYM(cudnnBackendExecute)
#undef EMU_SYM
    };
    emu_dl_register("libcudnn.so.9", "FSDPC_EMU_CUDNN", syms, sizeof syms / sizeof syms[0]);
}

}  // extern "C"
