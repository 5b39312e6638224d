// cudnn_attention: --attention cudnn|auto. Causal GQA attention as cuDNN's fused flash SDPA, bf16
// operands, built in C from the backend graph API: cuDNN's C++ frontend is a header-only C++
// layer we do not want to depend on. libcudnn is opened at run time (dlopen, so LD_LIBRARY_PATH
// and a Python environment's nvidia/cudnn/lib work) and only the functions of one table are
// used, so a machine without cuDNN still runs the native kernels and ./fsdpc has no libcudnn
// dependency.
//
// The graphs are the decomposed SDPA patterns that cuDNN's runtime fusion engines recognise as
// flash attention (the forms the frontend emits for its sdpa nodes):
//   forward:  S = scale Q K^T, causal mask, P = softmax(S), O = P V, Stats = max + log(sum exp)
//   backward: Sum = rowsum(dO * O), P = exp(scale Q K^T - Stats) (masked), dV = P^T dO,
//             dS = scale P (dO V^T - Sum), dQ = dS K, dK = dS^T Q
// Under GQA, K and V carry KV heads and the matmuls broadcast them over each group; dK and dV are
// reduced from per-query-head (B, H, T, hd) products. Stats is the native kernels' lse (B, H, T),
// and Sum lands in the native backward's Delta scratch, so the saved and scratch sizes stay.
// Activations are (B, T, heads, hd) rows, which cuDNN reads through (B, heads, T, hd) strides:
// bf16 ones where they lie, fp32 ones (the start-up check, tests) through bf16 copies.
// Document masks (kstart) add the frontend's padding mask and ragged rows: each batch entry is
// one document (seq_len_q = seq_len_kv = its length, INT32 (B, 1, 1, 1), bounding the matmuls
// through their M/N/K overrides and masking scores past them before the causal mask) whose rows
// start at a ragged offset (INT32 (B + 1, 1, 1, 1), in elements) of the packed tensors; see
// "document masks as cuDNN batch entries" below.
// A finalized plan is cached per (direction, documents or not, B or entries, T, H, KV, hd).
// The frontend's version rules, which calling the backend directly skips, are kept here (each
// cites its source): 9.10.0 and 9.10.1 are refused (cudnn_version_refusal); before 9.6 the dQ
// accumulator is zeroed before every backward (cudnn_att_bwd); up to 9.15.0 a backward at
// T % 128 != 0 gets a padding mask of whole lengths, and from 9.0 to 9.9 a padding-masked
// backward masks again after - Stats (build_bwd). The start-up check runs the backward on a
// dirtied workspace at T=96 and at T=128.
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cudnn_attention.cuh"

namespace {

// ---- the library, opened at run time ----
#define CUDNN_FUNCS(X)                                                                                      \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnSetStream) X(cudnnBackendCreateDescriptor) \
        X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute) X(cudnnBackendGetAttribute)            \
            X(cudnnBackendFinalize) X(cudnnBackendExecute)
struct CudnnApi {
#define CUDNN_MEMBER(f) decltype(&::f) f;
    CUDNN_FUNCS(CUDNN_MEMBER)
#undef CUDNN_MEMBER
    decltype(&::cudnnGetLastErrorString) cudnnGetLastErrorString;  // optional: quoted in refusals
};
CudnnApi dnn;
cudnnHandle_t dnn_handle;
constexpr const char *kCudnnLib = "libcudnn.so.9";

// cuDNN versions whose fused attention the frontend refuses for known bugs: 9.10.0 and 9.10.1
// (NVIDIA/cudnn-frontend include/cudnn_frontend/node/sdpa_support_surface.h for the forward,
// scaled_dot_product_flash_attention.h, CompositeSDPABackwardNode::pre_validate_node, for the
// backward); NULL for any other
const char *cudnn_version_refusal(void) {
    static char why[256];
    const int v = (int)dnn.cudnnGetVersion();
    if (v != 91000 && v != 91001) return NULL;
    snprintf(why, sizeof why, "cuDNN %d.%d.%d has known bugs in its fused attention (the cuDNN frontend refuses "
             "9.10.0 and 9.10.1): use cuDNN 9.10.2 or newer, or --attention native", v / 10000, v / 100 % 100, v % 100);
    return why;
}

// NULL once the table is filled, a handle exists and the version is not refused, else why not
const char *cudnn_open(void) {
    static char why[512];
    static bool open;  // a failure is tried again by the next selection
    if (open) return cudnn_version_refusal();
    void *lib = dlopen(kCudnnLib, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *path = getenv("LD_LIBRARY_PATH");
        snprintf(why, sizeof why, "cannot load %s (%s; LD_LIBRARY_PATH=%s): install cuDNN 9 or add its lib directory, "
                 "e.g. a Python environment's nvidia/cudnn/lib, to LD_LIBRARY_PATH", kCudnnLib, dlerror(),
                 path && *path ? path : "(unset)");
        return why;
    }
#define CUDNN_LOOKUP(f)                                                                        \
    if (!(*(void **)&dnn.f = dlsym(lib, #f))) {                                                \
        snprintf(why, sizeof why, "%s has no %s (cuDNN 9 is needed)", kCudnnLib, #f);          \
        return why;                                                                            \
    }
    CUDNN_FUNCS(CUDNN_LOOKUP)
#undef CUDNN_LOOKUP
    *(void **)&dnn.cudnnGetLastErrorString = dlsym(lib, "cudnnGetLastErrorString");
    cudnnStatus_t s = dnn.cudnnCreate(&dnn_handle);
    if (s == CUDNN_STATUS_SUCCESS) s = dnn.cudnnSetStream(dnn_handle, cuda_stream());
    if (s != CUDNN_STATUS_SUCCESS) {
        snprintf(why, sizeof why, "cudnnCreate failed: %s", dnn.cudnnGetErrorString(s));
        return why;
    }
    open = true;
    return cudnn_version_refusal();
}

// cuDNN 9 groups its statuses by the thousands: a hint per group
const char *cudnn_hint(cudnnStatus_t s) {
    switch ((int)s / 1000) {
    case 2: return "cuDNN refused an argument: a bug in fsdpc (--attention native avoids cuDNN)";
    case 3: return "this cuDNN has no engine for it on this GPU (--attention native, or another cuDNN version)";
    case 4: return "cuDNN failed inside, often for want of device memory (a smaller --batch_size, or --attention native)";
    case 5: return "the cuDNN kernel failed on the GPU (nvidia-smi; --attention native avoids cuDNN)";
    default: return "cuDNN is not usable here (--attention native avoids it)";
    }
}

// Calls that must succeed once a plan exists (executing it): a failure ends the job.
#define cudnnCheck(call) cudnn_check_at((call), #call, __FILE__, __LINE__)
void cudnn_check_at(cudnnStatus_t s, const char *call, const char *file, int line) {
    if (s != CUDNN_STATUS_SUCCESS)
        err_fatal_at(file, line, "%s failed: %s (hint: %s)", call, dnn.cudnnGetErrorString(s), cudnn_hint(s));
}

// ---- building a graph: a refusal is an answer (fall back), not an error ----

// Tensor UIDs the variant pack supplies; virtual tensors count up from UID_VIRTUAL.
enum : int64_t { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_DO, UID_DQ, UID_DK, UID_DV,
                 UID_SUM, UID_SEQ_Q, UID_SEQ_KV, UID_OFF_Q, UID_OFF_KV, UID_ONE, UID_DQ_ACCUM, UID_VIRTUAL = 100 };

// the frontend's layouts (scaled_dot_product_flash_attention.h, CompositeSDPANode and
// CompositeSDPABackwardNode): scores (b, h, s_q, s_kv) packed, row statistics (b, h, s_q, 1)
// packed, transposes (reshape_p, reshape_dS) with the last two strides swapped
int probe_mistake = CUDNN_PROBE_NONE;  // cuda_cudnn_probe's deliberate mistake, else none
bool mistake(int m) { return probe_mistake == m; }

struct Shape {
    int64_t dim[4], stride[4];
};
Shape packed(int64_t a, int64_t b, int64_t c, int64_t d) { return {{a, b, c, d}, {b * c * d, c * d, d, 1}}; }
// fp32/bf16 rows (B, S, heads, hd) seen as (B, heads, T, hd), T <= S of each entry's S rows (a ring
// block's queries or keys), and transposed as (B, heads, hd, T)
Shape heads_view(int64_t B, int64_t heads, int64_t T, int64_t hd, int64_t S = 0) {
    return {{B, heads, T, hd}, {(S ? S : T) * heads * hd, hd, heads * hd, 1}};
}
Shape heads_view_t(int64_t B, int64_t heads, int64_t T, int64_t hd, int64_t S = 0) {
    return {{B, heads, hd, T}, {(S ? S : T) * heads * hd, hd, 1, heads * hd}};
}
// the (B, H, Tq, Tk) scores transposed in place of a reshape
Shape scores_t(int64_t B, int64_t H, int64_t Tq, int64_t Tk) { return {{B, H, Tk, Tq}, {H * Tq * Tk, Tq * Tk, 1, Tk}}; }

// A graph's sequence geometry: Tq queries against Tk keys, causal by index or not at all (a ring
// block's full rectangle), each batch entry's rows Sq (query-shaped) and Sk (kv-shaped) apart in
// memory. Whole-sequence attention: Tq = Tk = Sq = Sk = T, causal.
struct Geo {
    int64_t Tq, Tk, Sq, Sk;
    bool causal;
    bool operator==(const Geo &o) const {
        return Tq == o.Tq && Tk == o.Tk && Sq == o.Sq && Sk == o.Sk && causal == o.causal;
    }
};
Geo whole(int64_t T) { return Geo{T, T, T, T, true}; }

typedef cudnnBackendDescriptor_t Desc;

struct Graph {
    Desc owned[192];
    int n_owned = 0;
    Desc ops[40];
    int n_ops = 0;
    int64_t next_uid = UID_VIRTUAL;
    char why[640] = "";
    Desc neg_inf = nullptr, scale = nullptr, one = nullptr;
    // document-masked graphs only: the sequence lengths and the ragged offsets of query-shaped and
    // kv-shaped tensors
    Desc seq_q = nullptr, seq_kv = nullptr, off_q = nullptr, off_kv = nullptr;

    bool ok() const { return !why[0]; }
    bool step(cudnnStatus_t s, const char *what) {
        if (s != CUDNN_STATUS_SUCCESS && ok()) {
            char last[256] = "";
            if (dnn.cudnnGetLastErrorString) dnn.cudnnGetLastErrorString(last, sizeof last);
            snprintf(why, sizeof why, "%s failed: %s%s%s", what, dnn.cudnnGetErrorString(s), last[0] ? ": " : "", last);
        }
        return s == CUDNN_STATUS_SUCCESS;
    }
    // a new descriptor, owned by the graph; nullptr after a failure (later calls then do nothing)
    Desc make(cudnnBackendDescriptorType_t t) {
        Desc d = nullptr;
        if (!ok()) return nullptr;
        if (n_owned == (int)(sizeof owned / sizeof owned[0])) {
            snprintf(why, sizeof why, "the graph needs more than %d descriptors", n_owned);
            return nullptr;
        }
        if (step(dnn.cudnnBackendCreateDescriptor(t, &d), "cudnnBackendCreateDescriptor")) owned[n_owned++] = d;
        return d;
    }
    void set(Desc d, cudnnBackendAttributeName_t a, const char *name, cudnnBackendAttributeType_t t, int64_t n,
             const void *v) {
        char what[96];
        snprintf(what, sizeof what, "cudnnBackendSetAttribute(%s)", name);
        if (ok()) step(dnn.cudnnBackendSetAttribute(d, a, t, n, v), what);
    }
    void finalize(Desc d, const char *what) {
        if (ok()) step(dnn.cudnnBackendFinalize(d), what);
    }
    void release() {
        while (n_owned) dnn.cudnnBackendDestroyDescriptor(owned[--n_owned]);
    }
#define SET(d, attr, type, n, v) set(d, attr, #attr, type, n, v)

    // ragged: the tensor's (B + 1) element offsets of its batch entries (instead of dim 0's stride)
    Desc tensor(int64_t uid, cudnnDataType_t dt, const Shape &s, bool is_virtual, bool by_value = false,
                Desc ragged = nullptr) {
        Desc d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        const int64_t align = 16;
        SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
        SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dim);
        SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.stride);
        SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
        SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
        SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
        if (by_value) SET(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
        if (ragged) SET(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged);
        finalize(d, "cudnnBackendFinalize(tensor)");
        return d;
    }
    // a caller's activation rows, ragged by document in a document-masked graph
    Desc rows(int64_t uid, const Shape &s, Desc ragged) {
        return tensor(uid, CUDNN_DATA_BFLOAT16, s, false, false, ragged);
    }
    Desc virt(cudnnDataType_t dt, const Shape &s) { return tensor(next_uid++, dt, s, true); }
    void add_op(Desc op, const char *what) {
        finalize(op, what);
        if (ok()) ops[n_ops++] = op;
    }

    // y = mode(x [, b [, t]]); axis >= 0 for GEN_INDEX
    Desc pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, Desc x, Desc b, Desc t, Desc y, int64_t axis = -1) {
        Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
        SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
        if (axis >= 0) SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
        finalize(pw, "cudnnBackendFinalize(pointwise)");
        Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
        SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        if (b) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        if (t) SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
        SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        add_op(op, "cudnnBackendFinalize(pointwise operation)");
        return y;
    }
    // y = reduce over the dims where y is smaller than x (fp32)
    Desc reduction(cudnnReduceTensorOp_t red, Desc x, Desc y) {
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        Desc rd = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        SET(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &red);
        SET(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
        finalize(rd, "cudnnBackendFinalize(reduction)");
        Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
        SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        add_op(op, "cudnnBackendFinalize(reduction operation)");
        return y;
    }
    // c = a b, batched over the first two dims (b's heads broadcast over a's groups), fp32 accumulation.
    // m, n, k: per-batch-entry sizes of the product's dims (the sequence lengths), or nullptr.
    Desc matmul(Desc a, Desc b, Desc c, Desc m = nullptr, Desc n = nullptr, Desc k = nullptr) {
        const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
        Desc mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
        finalize(mm, "cudnnBackendFinalize(matmul)");
        Desc op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
        SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
        SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
        SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
        if (m) SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m);
        if (n) SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n);
        if (k) SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k);
        add_op(op, "cudnnBackendFinalize(matmul operation)");
        return c;
    }
    // y: x's elements under other dims and strides (the transposes)
    Desc reshape(Desc x, Desc y) {
        Desc op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        add_op(op, "cudnnBackendFinalize(reshape operation)");
        return y;
    }

    // the by-value FLOAT scalars: the score scale, the masked score (-inf, or the lowest float
    // before cuDNN 9.10, as the frontend's get_negative_inf_value gives), and the backward's one,
    // which softmax_sum is multiplied by where the frontend has no dropout (its one_tensor)
    void scalars(bool bwd) {
        scale = tensor(UID_SCALE, CUDNN_DATA_FLOAT, packed(1, 1, 1, 1), false, true);
        neg_inf = tensor(UID_NEG_INF, CUDNN_DATA_FLOAT, packed(1, 1, 1, 1), false, true);
        if (bwd) one = tensor(UID_ONE, CUDNN_DATA_FLOAT, packed(1, 1, 1, 1), false, true);
    }
    // Document masking: each batch entry is one document of seq_q = seq_kv tokens (device INT32,
    // (B, 1, 1, 1)) at the element offsets off_q / off_kv ((B + 1, 1, 1, 1)) of the packed rows.
    void documents(int64_t B, bool ragged) {
        seq_q = tensor(UID_SEQ_Q, CUDNN_DATA_INT32, packed(B, 1, 1, 1), false);
        seq_kv = tensor(UID_SEQ_KV, CUDNN_DATA_INT32, packed(B, 1, 1, 1), false);
        if (!ragged) return;
        off_q = tensor(UID_OFF_Q, CUDNN_DATA_INT32, packed(B + 1, 1, 1, 1), false);
        off_kv = tensor(UID_OFF_KV, CUDNN_DATA_INT32, packed(B + 1, 1, 1, 1), false);
    }
    // s (B, H, T, T) with the scores of rows past seq_q or columns past seq_kv replaced by the
    // masked score (the frontend's padding mask); s itself without documents
    Desc padding(Desc s, const Shape &shape) {
        if (!seq_q) return s;
        Desc row = pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr,
                             virt(CUDNN_DATA_INT32, shape), 2);
        Desc keep = pointwise(CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, seq_q, nullptr,
                              virt(CUDNN_DATA_BOOLEAN, shape));
        if (!mistake(CUDNN_PROBE_NO_SEQ_LEN_KV)) {  // the probe's mask leaves seq_len_kv out
            Desc col = pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr,
                                 virt(CUDNN_DATA_INT32, shape), 3);
            Desc col_in = pointwise(CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, seq_kv, nullptr,
                                    virt(CUDNN_DATA_BOOLEAN, shape));
            keep = pointwise(CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, keep, col_in, nullptr,
                             virt(CUDNN_DATA_BOOLEAN, shape));
        }
        return pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg_inf, keep,
                         virt(CUDNN_DATA_FLOAT, shape));
    }
    // s (B, H, T, T) with the scores of keys after the query replaced by the masked score
    Desc causal(Desc s, const Shape &shape) {
        Desc row = pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, nullptr, nullptr,
                             virt(CUDNN_DATA_INT32, shape), 2);
        Desc col = pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, nullptr, nullptr,
                             virt(CUDNN_DATA_INT32, shape), 3);
        Desc keep = pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, nullptr,
                              virt(CUDNN_DATA_BOOLEAN, shape));
        return pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg_inf, keep,
                         virt(CUDNN_DATA_FLOAT, shape));
    }
    // out (B, KV, T, hd) = a b summed over each group's query heads (a: (B, H, T, T) transposed
    // scores, rows over keys and columns over queries); the per-query-head product (the
    // frontend's dK_fullhead / dV_fullhead) is virtual, packed, in the I/O type
    void group_matmul(Desc a, Desc b, Desc out, int64_t B, int64_t H, int64_t KV, int64_t Tk, int64_t hd) {
        if (H == KV) {
            matmul(a, b, out, seq_kv, nullptr, seq_q);
            return;
        }
        reduction(CUDNN_REDUCE_TENSOR_ADD,
                  matmul(a, b, virt(CUDNN_DATA_BFLOAT16, packed(B, H, Tk, hd)), seq_kv, nullptr, seq_q), out);
    }

    // the operation graph, then the first engine of cuDNN's heuristics that finalizes into a plan
    Desc plan(int64_t *workspace) {
        Desc g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        SET(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn_handle);
        SET(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops);
        finalize(g, "cudnnBackendFinalize(operation graph)");
        Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
        SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
        SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        finalize(heur, "cudnnBackendFinalize(engine heuristics)");
        Desc cfgs[8];
        int64_t n = 0;
        for (Desc &c : cfgs) c = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        if (ok())
            step(dnn.cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 8, &n,
                                              cfgs),
                 "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)");
        n = n < 8 ? n : 8;  // the count of engines there are, which may exceed the configs given
        if (ok() && n == 0) snprintf(why, sizeof why, "cuDNN's heuristics offer no engine for the graph");
        cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
        for (int64_t i = 0; ok() && i < n; i++) {
            Desc p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            SET(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn_handle);
            SET(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (!ok()) break;
            last = dnn.cudnnBackendFinalize(p);  // an engine may not support the shape: try the next
            if (last != CUDNN_STATUS_SUCCESS) continue;
            int64_t got = 0;
            step(dnn.cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                              workspace),
                 "cudnnBackendGetAttribute(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)");
            return ok() ? p : nullptr;
        }
        if (ok())
            snprintf(why, sizeof why, "none of the %lld engines cuDNN offers finalizes into a plan (the last: %s)",
                     (long long)n, dnn.cudnnGetErrorString(last));
        return nullptr;
    }
#undef SET
};

// ---- plans per shape ----
struct Plan {
    int bwd, docs, B, H, KV, hd;  // docs: B counts document entries
    Geo geo;
    Desc plan;  // nullptr: cuDNN refused this shape (see why)
    int64_t workspace;
    Graph *graph;  // its descriptors live as long as the plan
    int32_t *seq_len, *seq_len_kv;  // a backward's padding mask without documents (bwd_pads_t): B lengths Tq, Tk (device)
};
Plan plans[64];
int n_plans;
size_t plans_version;  // the cuDNN version the cached plans were built for
enum AttChoice { ATT_NATIVE, ATT_CUDNN_AUTO, ATT_CUDNN_ONLY };
int att_choice = ATT_NATIVE;
ScratchBuf bf16_buf, workspace_buf;

// The graphs of the frontend's CompositeSDPANode (forward) and CompositeSDPABackwardNode
// (scaled_dot_product_flash_attention.h) with io_data_type BFLOAT16, intermediate_data_type FLOAT
// and compute_data_type FLOAT (every virtual tensor not given another type is FLOAT; matmuls,
// reductions and pointwise operations compute in FLOAT), in their order: Q K^T, scale, padding
// mask, (backward: - Stats,) causal mask, softmax (forward: max, sub, exp, sum, log + max into
// Stats, div) or exp (backward), then the products.
// docs: a document-masked graph, B entries of one document each (seq_q, ragged rows, dense Stats)
void build_fwd(Graph &g, bool docs, int64_t B, const Geo &x, int64_t H, int64_t KV, int64_t hd) {
    const int64_t Tq = x.Tq, Tk = x.Tk;
    const Shape sc = packed(B, H, Tq, Tk), rows = packed(B, H, Tq, 1);
    g.scalars(false);
    if (docs) g.documents(B, true);
    const cudnnDataType_t io = mistake(CUDNN_PROBE_IO_FLOAT) ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
    Shape qs = heads_view(B, H, Tq, hd, x.Sq);
    if (mistake(CUDNN_PROBE_HEAD_STRIDE2))
        for (int64_t &e : qs.stride) e *= 2;
    Desc q = g.tensor(UID_Q, io, qs, false, false, g.off_q);
    Desc kt = g.tensor(UID_K, io, heads_view_t(B, KV, Tk, hd, x.Sk), false, false, g.off_kv);
    Desc v = g.tensor(UID_V, io, heads_view(B, KV, Tk, hd, x.Sk), false, false, g.off_kv);
    Desc o = g.tensor(UID_O, io, heads_view(B, H, Tq, hd, x.Sq), false, false, g.off_q);
    Shape st = rows;
    if (mistake(CUDNN_PROBE_STATS_LAYOUT)) st.stride[1] = 1, st.stride[2] = H;
    Desc stats = g.tensor(UID_STATS, mistake(CUDNN_PROBE_STATS_BF16) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT, st, false);
    Desc s = g.matmul(q, kt, g.virt(mistake(CUDNN_PROBE_SCORES_HALF) ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT, sc), g.seq_q,
                      g.seq_kv);
    if (mistake(CUDNN_PROBE_MASK_BEFORE_SCALE) && x.causal) s = g.causal(s, sc);
    s = g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, g.scale, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    s = g.padding(s, sc);
    if (!mistake(CUDNN_PROBE_MASK_BEFORE_SCALE) && x.causal) s = g.causal(s, sc);
    Desc mx = g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, g.virt(CUDNN_DATA_FLOAT, rows));
    Desc z = g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, mx, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    Desc e = g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, z, nullptr, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    Desc sum = g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, g.virt(CUDNN_DATA_FLOAT, rows));
    Desc lg = g.pointwise(CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, nullptr, nullptr, g.virt(CUDNN_DATA_FLOAT, rows));
    g.pointwise(CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, nullptr, stats);
    // P leaves the softmax in the I/O type: the backend takes bmm2's A operand as the I/O type
    // (the frontend sets it so before bmm2)
    Desc p = g.pointwise(CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, sum, nullptr,
                         g.virt(mistake(CUDNN_PROBE_P_FLOAT) ? CUDNN_DATA_FLOAT : io, sc));
    g.matmul(p, v, o, g.seq_q, nullptr, g.seq_kv);
}

// The frontend's backward for cuDNN 9 without dropout or determinism: softmax_sum (FLOAT, packed
// (b, h, s_q, 1)) = rowsum(dO * O) * 1, and dQ through a FLOAT accumulator that an IDENTITY copies
// into dQ (its use_dp_workspace off). Both are real tensors the frontend places in its workspace:
// here softmax_sum is the caller's Sum scratch and the accumulator lies after the plan's workspace.
// Document-masked graphs give the accumulator dQ's strides and ragged offsets (the frontend's
// max_total_seq_len_q form), so it holds the packed rows and not entries * T of them.
// The frontend's version rules for this graph (scaled_dot_product_flash_attention.h,
// CompositeSDPABackwardNode): up to cuDNN 9.15.0 a graph without a padding mask whose s_kv is not
// a multiple of 128 gets one anyway, every entry's lengths T (pre_validate_node's "workaround
// padding mask"; bwd_pads_t); from 9.0 to 9.9 a padding-masked graph masks the scores again after
// subtracting Stats (expand_node's "2nd_padding" operations).
bool bwd_pads_t(bool docs, int64_t Tk) { return !docs && Tk % 128 && dnn.cudnnGetVersion() <= 91500; }
void build_bwd(Graph &g, bool docs, int64_t B, const Geo &x, int64_t H, int64_t KV, int64_t hd) {
    const int64_t Tq = x.Tq, Tk = x.Tk, Sq = x.Sq, Sk = x.Sk;
    const Shape sc = packed(B, H, Tq, Tk), rows = packed(B, H, Tq, 1);
    const cudnnDataType_t io = mistake(CUDNN_PROBE_IO_FLOAT) ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
    const size_t ver = dnn.cudnnGetVersion();
    g.scalars(true);
    if (docs || bwd_pads_t(docs, Tk)) g.documents(B, docs);
    if (mistake(CUDNN_PROBE_RAGGED_NO_PADDING)) {  // the offsets alone
        g.documents(B, true);
        g.seq_q = g.seq_kv = nullptr;
    }
    Desc q = g.tensor(UID_Q, io, heads_view(B, H, Tq, hd, Sq), false, false, g.off_q);
    Desc kt = g.tensor(UID_K, io, heads_view_t(B, KV, Tk, hd, Sk), false, false, g.off_kv);
    Desc vt = g.tensor(UID_V, io, heads_view_t(B, KV, Tk, hd, Sk), false, false, g.off_kv);
    Desc o = g.tensor(UID_O, io, heads_view(B, H, Tq, hd, Sq), false, false, g.off_q);
    Desc dout = g.tensor(UID_DO, io, heads_view(B, H, Tq, hd, Sq), false, false, g.off_q);
    Desc stats = g.tensor(UID_STATS, mistake(CUDNN_PROBE_STATS_BF16) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT, rows, false);
    Desc sum = g.tensor(UID_SUM, mistake(CUDNN_PROBE_SUM_BF16) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT, rows, false);
    Desc dq = g.tensor(UID_DQ, io, heads_view(B, H, Tq, hd, Sq), false, false, g.off_q);
    Desc dk = g.tensor(UID_DK, io, heads_view(B, KV, Tk, hd, Sk), false, false, g.off_kv);
    Desc dv = g.tensor(UID_DV, io, heads_view(B, KV, Tk, hd, Sk), false, false, g.off_kv);
    const cudnnDataType_t acc_dt = mistake(CUDNN_PROBE_DQ_ACCUM_BF16) ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    Desc dq_accum = g.off_q ? g.tensor(UID_DQ_ACCUM, acc_dt, heads_view(B, H, Tq, hd), false, false, g.off_q)
                            : g.tensor(UID_DQ_ACCUM, acc_dt, packed(B, H, Tq, hd), false);
    // softmax_sum = rowsum(dO * O) * 1 (the product with the frontend's (b, h, s_q, d) strides)
    const Shape od_shape = {{B, H, Tq, hd}, {H * Tq * hd, Tq * hd, H * hd, 1}};
    Desc od = g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, nullptr, g.virt(CUDNN_DATA_FLOAT, od_shape));
    Desc rs = g.reduction(CUDNN_REDUCE_TENSOR_ADD, od, g.virt(CUDNN_DATA_FLOAT, rows));
    g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rs, g.one, nullptr, sum);
    // P = exp(scale Q K^T - Stats), masked
    Desc s = g.matmul(q, kt, g.virt(CUDNN_DATA_FLOAT, sc), g.seq_q, g.seq_kv);
    s = g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, s, g.scale, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    s = g.padding(s, sc);
    s = g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, s, stats, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    if (g.seq_q && ver >= 90000 && ver < 91000) s = g.padding(s, sc);  // the second padding mask
    if (x.causal) s = g.causal(s, sc);
    Desc p = g.pointwise(CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, s, nullptr, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    // dV = P^T dO, P^T in the I/O type
    Desc pt = g.reshape(p, g.virt(mistake(CUDNN_PROBE_PT_FLOAT) ? CUDNN_DATA_FLOAT : io, scores_t(B, H, Tq, Tk)));
    g.group_matmul(pt, dout, dv, B, H, KV, Tk, hd);
    // dS = scale P (dO V^T - Sum), FLOAT
    Desc dp = g.matmul(dout, vt, g.virt(CUDNN_DATA_FLOAT, sc), g.seq_q, g.seq_kv);
    dp = g.pointwise(CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, sum, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    dp = g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp, p, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    Desc ds = g.pointwise(CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp, g.scale, nullptr, g.virt(CUDNN_DATA_FLOAT, sc));
    // dK = dS^T Q, dS^T in the I/O type
    Desc dst = g.reshape(ds, g.virt(mistake(CUDNN_PROBE_DS_FLOAT) ? CUDNN_DATA_FLOAT : io, scores_t(B, H, Tq, Tk)));
    g.group_matmul(dst, q, dk, B, H, KV, Tk, hd);
    // dQ = dS K into the accumulator, copied into dQ (K's transposed view reshaped back, ragged as K)
    Desc k = g.reshape(kt, g.tensor(g.next_uid++, io, heads_view(B, KV, Tk, hd, Sk), true, false, g.off_kv));
    g.matmul(ds, k, dq_accum, g.seq_q, nullptr, g.seq_kv);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, dq_accum, nullptr, nullptr, dq);
}

// the accumulator's bytes, after the plan's workspace (256-byte aligned)
size_t dq_accum_bytes(int B, int T, int H, int hd) { return ((size_t)B * T * H * hd * 4 + 255) / 256 * 256; }
size_t ws_head(int64_t ws) { return ((size_t)(ws > 0 ? ws : 0) + 255) / 256 * 256; }

const char kRefusedBefore[] = "cuDNN refused this shape before";

// the cached plan of a shape, built on first use; its plan is nullptr (and *why says why) when
// cuDNN refused it
Plan *plan_geo(int bwd, int docs, int B, const Geo &x, int H, int KV, int hd, const char **why) {
    static char msg[900];
    *why = NULL;
    for (int i = 0; i < n_plans; i++) {
        Plan &p = plans[i];
        if (p.bwd == bwd && p.docs == docs && p.B == B && p.geo == x && p.H == H && p.KV == KV && p.hd == hd) {
            if (!p.plan) *why = kRefusedBefore;
            return &p;
        }
    }
    if (n_plans == (int)(sizeof plans / sizeof plans[0])) err_fatal("attention: more than %d cuDNN plans", n_plans);
    Plan &p = plans[n_plans++];
    p = Plan{bwd, docs, B, H, KV, hd, x, nullptr, 0, new Graph(), nullptr, nullptr};
    Graph &g = *p.graph;
    (bwd ? build_bwd : build_fwd)(g, docs, B, x, H, KV, hd);
    p.plan = g.plan(&p.workspace);
    if (!p.plan) {
        char shape[96];
        if (x == whole(x.Tq))
            snprintf(shape, sizeof shape, "T=%lld", (long long)x.Tq);
        else
            snprintf(shape, sizeof shape, "a %s ring block of %lld queries and %lld keys", x.causal ? "causal" : "full",
                     (long long)x.Tq, (long long)x.Tk);
        snprintf(msg, sizeof msg, "cuDNN could not build the %s%s graph (%s=%d %s H=%d KV=%d hd=%d): %s",
                 docs ? "document-masked " : "", bwd ? "backward" : "forward", docs ? "documents" : "B", B, shape, H, KV,
                 hd, g.why);
        *why = msg;
        g.release();
    } else if (g.seq_q && !docs) {
        int32_t *len = (int32_t *)mallocCheck(sizeof(int32_t) * 2 * B);
        for (int i = 0; i < B; i++) len[i] = (int32_t)x.Tq, len[B + i] = (int32_t)x.Tk;
        p.seq_len = (int32_t *)cuda_alloc(sizeof(int32_t) * B);
        p.seq_len_kv = (int32_t *)cuda_alloc(sizeof(int32_t) * B);
        cuda_upload(p.seq_len, len, sizeof(int32_t) * B);
        cuda_upload(p.seq_len_kv, len + B, sizeof(int32_t) * B);
        free(len);
    }
    return &p;
}
Plan *plan_for(int bwd, int docs, int B, int T, int H, int KV, int hd, const char **why) {
    return plan_geo(bwd, docs, B, whole(T), H, KV, hd, why);
}

// Empties the plan cache of refused shapes (a new selection tries them again), and of built plans
// too when !keep_built
void forget_plans(bool keep_built) {
    int kept = 0;
    for (int i = 0; i < n_plans; i++) {
        Plan &p = plans[i];
        if (p.plan && keep_built) {
            plans[kept++] = p;
            continue;
        }
        p.graph->release();
        delete p.graph;
        if (p.seq_len) cuda_free(p.seq_len), cuda_free(p.seq_len_kv);
    }
    n_plans = kept;
}

// Under --attention auto|cudnn, a call that the native kernel runs instead is logged once per
// reason, so that no fallback is quiet (refused shapes: once per shape, in takes).
enum Fallback { FB_DROPOUT, FB_FP32, FB_KV_CACHE, FB_DOCS, FB_RING_FP32, FB_N };
void fallback_once(Fallback f) {
    static bool said[FB_N];
    static const char *const why[FB_N] = {
        "dropout (cuDNN's dropout mask is not fsdpc's layout-free hash)",
        "an fp32 compute call (cuDNN's fused attention runs bf16 operands only)",
        "a KV-cache shape (fewer queries than keys, or a strided cache)",
        "more documents than the largest cuDNN entry bucket (64 per row), or offsets past INT32",
        "a ring block of fp32 activations (the blocks take cuDNN under --precision bf16 only)"};
    if (att_choice == ATT_NATIVE || said[f]) return;
    said[f] = true;
    log_msg("fsdpc: attention: the native kernel runs calls with %s; cuDNN runs the rest\n", why[f]);
}

// whether cuDNN may take calls with these options at all
bool chosen(const AttDrop *drop) {
    if (att_choice == ATT_NATIVE) return false;
    if (drop) fallback_once(FB_DROPOUT);
    if (!drop && cuda_ctx.compute == COMPUTE_FP32) fallback_once(FB_FP32);
    return !drop && cuda_ctx.compute != COMPUTE_FP32;
}

// Shapes the frontend declines at some versions while the backend API would still be asked for
// them (cudnn-frontend include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, the
// backward's pre_validate_node, and sdpa_support_surface.h): ragged (document) backward graphs
// with grouped-query heads before 9.6, and ragged graphs before Hopper below 9.18.1. Returns the
// rule's index into kVersionRules, or -1.
const char *const kVersionRules[] = {
    "cuDNN below 9.6 has no document-masked (ragged) backward with grouped-query heads",
    "cuDNN below 9.18.1 runs document-masked (ragged) graphs on Hopper and newer GPUs only"};
int version_shape_rule(int bwd, int docs, int H, int KV) {
    const size_t v = dnn.cudnnGetVersion();
    if (docs && bwd && H != KV && v < 90600) return 0;
    if (docs && cuda_ctx.cc_major < 9 && v < 91801) return 1;
    return -1;
}

// whether cuDNN takes this call; a refused shape under --attention cudnn ends the job
bool takes(int bwd, int docs, int B, const Geo &x, int H, int KV, int hd, const AttDrop *drop, Plan **plan) {
    if (!chosen(drop)) return false;
    const int rule = version_shape_rule(bwd, docs, H, KV);
    if (rule >= 0) {
        static bool said[2];
        if (att_choice == ATT_CUDNN_ONLY) err_fatal("--attention cudnn: %s", kVersionRules[rule]);
        if (!said[rule])
            log_msg("fsdpc: attention: %s; the native kernel runs those calls (--attention auto)\n", kVersionRules[rule]);
        said[rule] = true;
        return false;
    }
    const char *why;
    *plan = plan_geo(bwd, docs, B, x, H, KV, hd, &why);
    if (!why) return true;
    if (att_choice == ATT_CUDNN_ONLY) err_fatal("--attention cudnn: %s", why);
    if (why != kRefusedBefore)
        log_msg("fsdpc: attention: %s; the native kernel runs this shape (--attention auto)\n", why);
    return false;
}

// the bf16 copies of one call, carved from one buffer (256-byte aligned pieces)
uint16_t *const *bf16_slots(const size_t *n, int count) {
    static uint16_t *slot[8];
    size_t total = 0;
    for (int i = 0; i < count; i++) total += (n[i] * 2 + 255) / 256 * 256;
    char *base = (char *)bf16_buf.get(total);
    for (int i = 0; i < count; i++) {
        slot[i] = (uint16_t *)base;
        base += (n[i] * 2 + 255) / 256 * 256;
    }
    return slot;
}

// the plan's workspace with extra bytes of fsdpc's after it (see ws_head), nullptr if none
char *plan_workspace(const Plan &p, size_t extra) {
    const size_t n = ws_head(p.workspace) + extra;
    return n ? (char *)workspace_buf.get(n) : nullptr;
}

// the masked score the frontend gives this cuDNN (its get_negative_inf_value)
float masked_score(void) { return dnn.cudnnGetVersion() < 91000 ? -FLT_MAX : -INFINITY; }

void execute(const Plan &p, const int64_t *uids, void *const *ptrs, int n, void *ws) {
    Desc pack;
    cudnnCheck(dnn.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    cudnnCheck(dnn.cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    cudnnCheck(dnn.cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    cudnnCheck(dnn.cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    cudnnCheck(dnn.cudnnBackendFinalize(pack));
    cudnnCheck(dnn.cudnnBackendExecute(dnn_handle, p.plan, pack));
    cudnnCheck(dnn.cudnnBackendDestroyDescriptor(pack));
}

// ---- document masks as cuDNN batch entries ----
// A document-masked call runs its documents as the batch entries of a ragged graph: entry i is
// document i (in memory order) with seq_q = seq_kv = its length, its rows at element offset
// start * heads * hd of the packed (B*T, heads, hd) tensors, Stats dense (entries, H, T). A row
// padded after its document has the padding as a document of its own, as kernels.h defines it,
// so every position belongs to exactly one entry and each output element is written once, with
// the native kernels' value. The entry count is rounded up to a bucket, B * 2^k (k >= 1: one
// document and its padding per row fits the first), so a plan serves every batch with as many
// documents or fewer; the spare entries are empty (seq_len 0, offsets at the end).
constexpr int kDocThreads = 256;
constexpr int kDocSlots = kDocThreads + 1;  // per-thread counts, then the total
constexpr int kMaxDocEntriesPerRow = 64;    // more (documents shorter than T / 64 on average): native

// the document table of a (B*T) kstart, on the device; each array 16-byte aligned
struct DocTable {
    int32_t *count;         // (1) documents
    int32_t *seq;           // (N) entry lengths, 0 past the documents
    int32_t *off_q, *off_kv;  // (N + 1) element offsets, the end past the documents
    int32_t *doc;           // (N) each position's entry
};
size_t doc_align(size_t n) { return (n + 3) / 4 * 4; }

// One block: a chunk of positions per thread, counted, scanned, then written. A document starts
// where a query sees keys from itself on (kstart[p] == t); it runs while kstart stays.
__global__ void doc_table_kernel(DocTable tab, const int32_t *kstart, int T, int N, int q_row, int kv_row) {
    __shared__ int part[kDocSlots];
    const int chunk = (N + kDocThreads - 1) / kDocThreads;
    const int lo = min(N, (int)threadIdx.x * chunk), hi = min(N, lo + chunk);
    int c = 0;
    for (int p = lo; p < hi; p++) c += kstart[p] == p % T;
    part[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int i = 0; i < kDocThreads; i++) {
            const int x = part[i];
            part[i] = total;
            total += x;
        }
        part[kDocThreads] = total;
        *tab.count = total;
    }
    __syncthreads();
    int j = part[threadIdx.x] - 1;  // position 0 starts a document: lo's own start makes j valid
    for (int p = lo; p < hi; p++) {
        const int t = p % T;
        if (kstart[p] == t) {
            int end = p + 1;
            while (end % T && kstart[end] == t) end++;
            j++;
            tab.seq[j] = end - p, tab.off_q[j] = p * q_row, tab.off_kv[j] = p * kv_row;
        }
        tab.doc[p] = j;
    }
    for (int i = part[kDocThreads] + threadIdx.x; i <= N; i += kDocThreads) {
        if (i < N) tab.seq[i] = 0;
        tab.off_q[i] = N * q_row, tab.off_kv[i] = N * kv_row;
    }
}

// the native row log-sum-exp (B, H, T) to the entries' dense Stats (entries, H, T), or back
__global__ void doc_stats_kernel(float *lse, float *dense, const int32_t *doc, const int32_t *kstart, int T, int H,
                                 size_t n, bool to_dense) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / ((size_t)H * T), h = i / T % H, t = i % T, p = b * T + t;
        const size_t d = ((size_t)doc[p] * H + h) * T + t - kstart[p];
        if (to_dense)
            dense[d] = lse[i];
        else
            lse[i] = dense[d];
    }
}

ScratchBuf doc_buf, doc_stats_buf;

// The micro-batch's document starts as the loader gave them (cuda_documents_loaded): their count
// is known on the host, and the table the first call builds serves every layer's calls after it.
struct DocHint {
    const int32_t *kstart;  // the device copy the attention calls get
    size_t n;
    int T, count;
    unsigned gen;  // one per load; 0: none yet
} doc_hint;
struct DocBuilt {  // what the table in doc_buf was built from
    unsigned gen;
    int q_row, kv_row;
    const int32_t *base;
} doc_built;

// The call's document table and its entry bucket, or 0 (the native kernels run it): offsets past
// INT32 or more documents than the largest bucket. Without the loader's hint for this kstart it
// reads the document count back (a sync).
int doc_entries(DocTable *tab, const int32_t *kstart, int B, int T, int H, int KV, int hd) {
    const size_t N = (size_t)B * T;
    if (N * H * hd > 0x7fffffff) return 0;
    const size_t na = doc_align(N), nb = doc_align(N + 1);
    int32_t *base = (int32_t *)doc_buf.get(sizeof(int32_t) * (4 + 2 * na + 2 * nb));
    *tab = DocTable{base, base + 4, base + 4 + na, base + 4 + na + nb, base + 4 + na + 2 * nb};
    const bool hinted = doc_hint.gen && kstart == doc_hint.kstart && N == doc_hint.n && T == doc_hint.T;
    const DocBuilt want{hinted ? doc_hint.gen : 0, H * hd, KV * hd, base};
    if (!hinted || want.gen != doc_built.gen || want.q_row != doc_built.q_row || want.kv_row != doc_built.kv_row ||
        want.base != doc_built.base) {
        doc_table_kernel<<<1, kDocThreads, 0, cuda_stream()>>>(*tab, kstart, T, (int)N, H * hd, KV * hd);
        cudaCheckLaunch();
        doc_built = want;
    }
    int32_t n = doc_hint.count;
    if (!hinted) cuda_download(&n, tab->count, sizeof n);
    int entries = 2 * B;
    while (entries < n) entries *= 2;
    return entries <= kMaxDocEntriesPerRow * B ? entries : 0;
}

}  // namespace

// counted as doc_table_kernel counts: a position starts a document where it sees keys from itself on
void cuda_documents_loaded(const int32_t *kstart, const int32_t *host_kstart, int ntok, int T) {
    int count = 0;
    for (int p = 0; p < ntok; p++) count += host_kstart[p] == p % T;
    doc_hint = DocHint{kstart, (size_t)ntok, T, count, doc_hint.gen + 1 ? doc_hint.gen + 1 : 1};
}

namespace {

// the entries' dense Stats and Sum
float *doc_stats(int entries, int H, int T, int which) {
    const size_t n = (size_t)entries * H * T;
    return (float *)doc_stats_buf.get(sizeof(float) * 2 * n) + which * n;
}

void doc_stats_move(float *lse, float *dense, const DocTable &tab, const int32_t *kstart, int B, int T, int H,
                    bool to_dense) {
    const size_t n = (size_t)B * H * T;
    doc_stats_kernel<<<grid_for(n, kDocThreads), kDocThreads, 0, cuda_stream()>>>(lse, dense, tab.doc, kstart, T, H,
                                                                                   n, to_dense);
    cudaCheckLaunch();
}

}  // namespace

// The call's tensors as cuDNN takes them: bf16 activations where they lie; fp32 ones through bf16
// copies (inputs rounded before, outputs widened after).
struct Bf16View {
    const size_t *n;
    uint16_t *const *slot;
    void *in(int i, Act x) const {
        if (x.bf16) return x.p;
        cuda_f32_to_bf16(slot[i], (const float *)x.p, n[i]);
        return slot[i];
    }
    void *out(int i, Act x) const { return x.bf16 ? x.p : slot[i]; }
    void widen(int i, Act x) const {
        if (!x.bf16) cuda_bf16_to_f32((float *)x.p, slot[i], n[i]);
    }
};

bool cudnn_att_fwd(Act out, float *lse, Act q, Act k, Act v, int B, int Tq, int Tk, int H, int KV, int hd,
                   size_t kv_bstride, const int32_t *kstart, const AttDrop *drop) {
    if (!chosen(drop)) return false;
    if (Tq != Tk || kv_bstride != (size_t)Tk * KV * hd) {
        fallback_once(FB_KV_CACHE);
        return false;
    }
    const int T = Tq;
    DocTable tab{};
    const int entries = kstart ? doc_entries(&tab, kstart, B, T, H, KV, hd) : B;
    if (!entries) fallback_once(FB_DOCS);
    Plan *plan;
    if (!entries || !takes(0, kstart != nullptr, entries, whole(T), H, KV, hd, drop, &plan)) return false;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    const size_t n[4] = {nq, nkv, nkv, nq};
    const Bf16View b{n, out.bf16 ? nullptr : bf16_slots(n, 4)};
    float scale = 1.0f / sqrtf((float)hd), neg_inf = masked_score();
    float *stats = kstart ? doc_stats(entries, H, T, 0) : lse;
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF,
                            UID_SEQ_Q, UID_SEQ_KV, UID_OFF_Q, UID_OFF_KV};
    void *const ptrs[] = {b.in(0, q), b.in(1, k), b.in(2, v), b.out(3, out), stats, &scale, &neg_inf,
                          kstart ? tab.seq : nullptr, kstart ? tab.seq : nullptr,
                          kstart ? tab.off_q : nullptr, kstart ? tab.off_kv : nullptr};
    execute(*plan, uids, ptrs, kstart ? 11 : 7, plan_workspace(*plan, 0));
    b.widen(3, out);
    if (kstart) doc_stats_move(lse, stats, tab, kstart, B, T, H, false);
    return true;
}

bool cudnn_att_bwd(Act dq, Act dk, Act dv, float *sum, Act dout, Act out, const float *lse, Act q, Act k, Act v, int B,
                   int T, int H, int KV, int hd, const int32_t *kstart, const AttDrop *drop) {
    if (!chosen(drop)) return false;
    DocTable tab{};
    const int entries = kstart ? doc_entries(&tab, kstart, B, T, H, KV, hd) : B;
    if (!entries) fallback_once(FB_DOCS);
    Plan *plan;
    if (!entries || !takes(1, kstart != nullptr, entries, whole(T), H, KV, hd, drop, &plan)) return false;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    const size_t n[8] = {nq, nkv, nkv, nq, nq, nq, nkv, nkv};  // q k v o dO | dq dk dv
    const Bf16View b{n, dq.bf16 ? nullptr : bf16_slots(n, 8)};
    float scale = 1.0f / sqrtf((float)hd), neg_inf = masked_score(), one = 1.0f;
    const size_t acc_bytes = dq_accum_bytes(B, T, H, hd);
    char *ws = plan_workspace(*plan, acc_bytes), *acc = ws + ws_head(plan->workspace);
    // before cuDNN 9.6 the backward adds dQ into its accumulator as it finds it, and the frontend
    // zeroes it before every execution (cudnn-frontend scaled_dot_product_flash_attention.h,
    // CompositeSDPABackwardNode::collect_tensors_in_workspace_node: a memset of dQ_accum_size bytes
    // at its offset, which graph_interface.h's run_auxiliary_kernels issues on the handle's stream)
    if (dnn.cudnnGetVersion() < 90600) cudaCheck(cudaMemsetAsync(acc, 0, acc_bytes, cuda_stream()));
    float *stats = (float *)lse;
    if (kstart) {  // the entries' Stats from the saved lse; Sum is scratch in their layout
        stats = doc_stats(entries, H, T, 0), sum = doc_stats(entries, H, T, 1);
        doc_stats_move((float *)lse, stats, tab, kstart, B, T, H, true);
    }
    const int64_t uids[] = {UID_Q,     UID_K,       UID_V,  UID_O,        UID_DO,    UID_STATS,  UID_SUM,
                            UID_DQ,    UID_DK,      UID_DV, UID_DQ_ACCUM, UID_SCALE, UID_NEG_INF, UID_ONE,
                            UID_SEQ_Q, UID_SEQ_KV,  UID_OFF_Q, UID_OFF_KV};
    const int32_t *seq = kstart ? tab.seq : plan->seq_len;  // both lengths: seq_len_q = seq_len_kv = T
    void *const ptrs[] = {b.in(0, q),   b.in(1, k),   b.in(2, v),   b.in(3, out), b.in(4, dout),
                          stats,        sum,          b.out(5, dq), b.out(6, dk), b.out(7, dv),
                          acc,          &scale,       &neg_inf,     &one,
                          (void *)seq,  (void *)seq,
                          kstart ? tab.off_q : nullptr, kstart ? tab.off_kv : nullptr};
    execute(*plan, uids, ptrs, kstart ? 18 : seq ? 16 : 14, ws);
    b.widen(5, dq), b.widen(6, dk), b.widen(7, dv);
    return true;
}

namespace {

// The start-up check's problems: GQA at T=96 (not a multiple of a 64-row tile, nor of the 128
// below which cuDNN up to 9.15 needs a padding mask in the backward: bwd_pads_t), then at T=128
// (one batch entry: the emulation's time)
constexpr int kCheckH = 4, kCheckKV = 2;
constexpr struct {
    int B, T;
} kCheck[2] = {{2, 96}, {1, 128}};

// max |a - b| / max |b| over n device floats
double dev_rel_err(const float *a, const float *b, size_t n) {
    float *ha = (float *)mallocCheck(sizeof(float) * n * 2), *hb = ha + n;
    cuda_download(ha, a, sizeof(float) * n);
    cuda_download(hb, b, sizeof(float) * n);
    double md = 0.0, mr = 1e-6;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)ha[i] - hb[i]);
        md = d == d ? fmax(md, d) : INFINITY;  // a NaN disagrees
        mr = fmax(mr, fabs((double)hb[i]));
    }
    free(ha);
    return md / mr;
}

// Fills a backward plan's workspace, dQ accumulator included, with garbage: a cuDNN that reads
// what an earlier call left there (before 9.6, unless zeroed: cudnn_att_bwd) then disagrees,
// where fresh memory, zero on many GPUs, would hide it
void dirty_workspace(int B, int T, int hd) {
    const char *why;
    const Plan &p = *plan_for(1, 0, B, T, kCheckH, kCheckKV, hd, &why);
    const size_t acc = dq_accum_bytes(B, T, kCheckH, hd);
    cudaCheck(cudaMemsetAsync(plan_workspace(p, acc), 0x5a, ws_head(p.workspace) + acc, cuda_stream()));
}

// cuDNN against the native kernel on a small random GQA problem: the forward output, the three
// gradients of a backward run on a dirtied workspace, and (stats) the native backward run on
// cuDNN's saved statistics; NULL or the disagreement
const char *self_check_at(int B, int T, int hd, bool stats_too) {
    static char why[256];
    const int acts_bf16 = cuda_ctx.acts_bf16;  // the check's tensors are fp32, whatever the run's activations
    cuda_ctx.acts_bf16 = 0;
    const int H = kCheckH, KV = kCheckKV;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd, nst = (size_t)B * H * T;
    const size_t len[] = {nq, nkv, nkv, nq};  // q k v dO (and the outputs' shapes follow)
    float *host = (float *)mallocCheck(sizeof(float) * (2 * nq + 2 * nkv));
    uint64_t state = 0x5eed;
    for (size_t i = 0; i < 2 * nq + 2 * nkv; i++)
        host[i] = (float)((rng_splitmix64_next(&state) >> 40) * 0x1p-24 * 4.0 - 2.0);
    float *in[4], *res[2][5], *stats[2], *scratch = (float *)cuda_alloc(sizeof(float) * nst);
    const float *src = host;
    for (int i = 0; i < 4; i++) {
        in[i] = (float *)cuda_alloc(sizeof(float) * len[i]);
        cuda_upload(in[i], src, sizeof(float) * len[i]);
        src += len[i];
    }
    const int saved_choice = att_choice;
    for (int path = 0; path < 2; path++) {  // 0 native, 1 cuDNN
        att_choice = path ? ATT_CUDNN_ONLY : ATT_NATIVE;
        const size_t rl[] = {nq, nq, nkv, nkv, nq};  // out dq dk dv; [1][4]: the native dq on cuDNN's stats
        for (int i = 0; i < 5; i++) res[path][i] = (float *)cuda_alloc(sizeof(float) * rl[i]);
        stats[path] = (float *)cuda_alloc(sizeof(float) * nst);
        cuda_attention_fwd(res[path][0], stats[path], in[0], in[1], in[2], B, T, T, H, KV, hd, nkv / B, NULL, 0, NULL);
        if (path) dirty_workspace(B, T, hd);
        cuda_attention_bwd(res[path][1], res[path][2], res[path][3], scratch, in[3], res[path][0], stats[path], in[0],
                           in[1], in[2], B, T, H, KV, hd, NULL, 0, NULL);
    }
    // the native backward on cuDNN's statistics: they must mean the same thing
    att_choice = ATT_NATIVE;
    float *dk_x = (float *)cuda_alloc(sizeof(float) * nkv), *dv_x = (float *)cuda_alloc(sizeof(float) * nkv);
    if (stats_too)
        cuda_attention_bwd(res[1][4], dk_x, dv_x, scratch, in[3], res[1][0], stats[1], in[0], in[1], in[2], B, T, H,
                           KV, hd, NULL, 0, NULL);
    att_choice = saved_choice;
    const char *what[] = {"output", "dq", "dk", "dv", "dq from cuDNN's softmax statistics"};
    why[0] = 0;
    const double tol = 3e-2;  // bf16 operands on both sides, rounded at different points (each is within
                              // 2e-2 of fp32 in test_gpu)
    for (int i = 0; i < 4 + stats_too && !why[0]; i++) {
        const size_t nn = i == 2 || i == 3 ? nkv : nq;
        const double e = dev_rel_err(res[1][i], res[0][i == 4 ? 1 : i], nn);
        if (!(e <= tol))
            snprintf(why, sizeof why,
                     "cuDNN and the native kernel disagree on a %d-head hd %d check at T=%d: %s rel err %.3g > %g", H,
                     hd, T, what[i], e, tol);
    }
    for (int p = 0; p < 2; p++) {
        for (int i = 0; i < 5; i++) cuda_free(res[p][i]);
        cuda_free(stats[p]);
    }
    for (int i = 0; i < 4; i++) cuda_free(in[i]);
    cuda_free(dk_x), cuda_free(dv_x), cuda_free(scratch);
    free(host);
    cuda_ctx.acts_bf16 = acts_bf16;
    return why[0] ? why : NULL;
}

// the check at both of its problems, each backward on a dirtied workspace
const char *self_check(int hd) {
    const char *why = NULL;
    for (int i = 0; i < 2 && !why; i++) why = self_check_at(kCheck[i].B, kCheck[i].T, hd, i == 0);
    return why;
}

// why a run of this precision and head dim keeps the native kernel whatever cuDNN would say, or NULL
const char *run_refusal(int bf16, int head_dim) {
    static char hd_why[128];
    if (!bf16) return "cuDNN's fused attention runs bf16 operands only; --precision float32 keeps the fp32 native kernel";
    if (head_dim == 64 || head_dim == 128) return NULL;
    snprintf(hd_why, sizeof hd_why, "head dim %d: cuDNN attention is used at head dims 64 and 128", head_dim);
    return hd_why;
}

}  // namespace

extern "C" const char *cuda_attention_select(int want, int bf16, int head_dim, int *failed) {
    static char line[768];
    *failed = 0;
    att_choice = ATT_NATIVE;
    forget_plans(true);  // a new selection tries the shapes cuDNN refused before again
    if (want == KERN_ATTENTION_NATIVE) return "attention: the native flash kernel (--attention native)";
    const char *why = run_refusal(bf16, head_dim);
    if (!why) why = cudnn_open();
    if (!why) {
        // plans belong to the library version they were built for (the emulation's tests play
        // several versions in one process)
        if (dnn.cudnnGetVersion() != plans_version) forget_plans(false);
        plans_version = dnn.cudnnGetVersion();
        att_choice = ATT_CUDNN_ONLY;  // the check's own refusals come back as reasons, not errors
        for (int i = 0; i < 4 && !why; i++)  // the check's shapes, forward and backward
            plan_for(i % 2, 0, kCheck[i / 2].B, kCheck[i / 2].T, kCheckH, kCheckKV, head_dim, &why);
        if (!why) why = self_check(head_dim);
        att_choice = ATT_NATIVE;
    }
    if (why) {
        *failed = want == KERN_ATTENTION_CUDNN;
        snprintf(line, sizeof line, *failed ? "--attention cudnn: %s" : "attention: the native flash kernel (%s)", why);
        return line;
    }
    att_choice = want == KERN_ATTENTION_CUDNN ? ATT_CUDNN_ONLY : ATT_CUDNN_AUTO;
    const int ver = (int)dnn.cudnnGetVersion();
    snprintf(line, sizeof line,
             "attention: cuDNN %d.%d.%d fused flash attention (bf16, head dim %d; agrees with the native kernel)",
             ver / 10000, ver / 100 % 100, ver % 100, head_dim);
    return line;
}

// fsdpc plan: what cuda_attention_select would choose if cuDNN loads and passes the check, which a
// plan cannot run
extern "C" void cuda_attention_plan(int want, int bf16, int head_dim) {
    att_choice = want == KERN_ATTENTION_NATIVE || run_refusal(bf16, head_dim) ? ATT_NATIVE
                 : want == KERN_ATTENTION_CUDNN                                ? ATT_CUDNN_ONLY
                                                                               : ATT_CUDNN_AUTO;
}

// fsdpc --version: the cuDNN that attention would load, by its own count, or why none. Only
// cudnnGetVersion is called, which needs no GPU; the library stays loaded for cudnn_open.
extern "C" const char *cuda_cudnn_version(void) {
    static char out[400];
    void *lib = dlopen(kCudnnLib, RTLD_NOW | RTLD_LOCAL);
    size_t (*get)(void) = nullptr;
    if (lib) *(void **)&get = dlsym(lib, "cudnnGetVersion");
    if (!get) {
        snprintf(out, sizeof out, "none (%s)", lib ? "libcudnn.so.9 has no cudnnGetVersion" : dlerror());
        return out;
    }
    const size_t v = get();  // major * 10000 + minor * 100 + patch since cuDNN 9
    snprintf(out, sizeof out, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    return out;
}

// gpu-check's acceptance list: whether cuDNN finalizes a plan for one graph shape (kept in the
// plan cache like any other), with its refusal in its own words
extern "C" const char *cuda_cudnn_graph_check(int bwd, int docs, int B, int T, int H, int KV, int hd) {
    const char *why = cudnn_open();
    if (!why) plan_for(bwd, docs, B, T, H, KV, hd, &why);
    return why;
}

extern "C" const char *cuda_cudnn_block_check(int bwd, int B, int Tq, int Tk, int S, int causal, int H, int KV, int hd) {
    const char *why = cudnn_open();
    if (!why) plan_geo(bwd, 0, B, Geo{Tq, Tk, S, S, causal != 0}, H, KV, hd, &why);
    return why;
}

namespace {
// the unified form (cuDNN 9.13.1+): one SDPA operation of Q, K, V and the scale into O and Stats;
// it has no causal mask (the frontend's UnifiedSDPANode takes none before cuDNN 9.21)
void build_unified(Graph &g, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd) {
    g.scalars(false);
    Desc q = g.rows(UID_Q, heads_view(B, H, T, hd), nullptr), k = g.rows(UID_K, heads_view(B, KV, T, hd), nullptr);
    Desc v = g.rows(UID_V, heads_view(B, KV, T, hd), nullptr), o = g.rows(UID_O, heads_view(B, H, T, hd), nullptr);
    Desc stats = g.tensor(UID_STATS, CUDNN_DATA_FLOAT, packed(B, H, T, 1), false);
    Desc op = g.make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
    const struct {
        cudnnBackendAttributeName_t a;
        const char *name;
        Desc *t;
    } in[] = {{CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, "SDPA_FWD_QDESC", &q},
              {CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, "SDPA_FWD_KDESC", &k},
              {CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, "SDPA_FWD_VDESC", &v},
              {CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, "SDPA_FWD_ODESC", &o},
              {CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, "SDPA_FWD_STATSDESC", &stats},
              {CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, "SDPA_FWD_SCALEDESC", &g.scale}};
    for (const auto &x : in) g.set(op, x.a, x.name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, x.t);
    g.add_op(op, "cudnnBackendFinalize(SDPA forward operation)");
}
}  // namespace

extern "C" const char *cuda_cudnn_probe(int bwd, int docs, int B, int T, int H, int KV, int hd, int mistake_) {
    static char why[700];
    const char *open_why = cudnn_open();
    if (open_why) return open_why;
    Graph *g = new Graph();
    probe_mistake = mistake_;
    if (mistake_ == CUDNN_PROBE_UNIFIED)
        build_unified(*g, B, T, H, KV, hd);
    else
        (bwd ? build_bwd : build_fwd)(*g, docs, B, whole(T), H, KV, hd);
    probe_mistake = CUDNN_PROBE_NONE;
    int64_t ws = 0;
    const bool ok = g->plan(&ws) != nullptr;
    snprintf(why, sizeof why, "%s", g->why);
    g->release();
    delete g;
    return ok ? NULL : why;
}

extern "C" const char *cuda_attention_kernel(void) {
    return att_choice == ATT_CUDNN_ONLY   ? "cudnn"
           : att_choice == ATT_CUDNN_AUTO ? "cudnn (native where cuDNN does not take a call)"
                                          : "native";
}

// ---- ring blocks (kernels.h kern_attention_part_*, with the host's KernBlock) ----
// A block's queries [q0, q0 + nq) of each row against its keys [0, nk): one graph of the same
// patterns with no causal mask for a full rectangle, or the causal one for a rank's own block,
// reading the activations where they lie (rows of S per batch entry). cuDNN writes, so its output
// and gradients go to scratch of the caller's layout, which the kernels below fold in: the forward
// merges O and Stats into out and lse by log-sum-exp (as the native part kernel does), the
// backward adds dQ, dK and dV. The backward runs on the final out and lse (Stats), so each block's
// gradients are its share of the whole softmax's.
namespace {

constexpr int kBlockThreads = 256;

// rows [q0, q0 + nq) of out (B, S, H, hd) and lse (B, H, S) merged with the block's ob (out's layout)
// and st (B, H, nq), a thread per query row and head; with first, the block's part alone, and rows
// outside it see nothing (0, -inf)
__global__ void block_merge_kernel(Act out, float *lse, Act ob, const float *st, int S, int H, int hd, int q0, int nq,
                                   bool first, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i % S, h = i / S % H, b = i / ((size_t)S * H);  // i: lse's (b, h, t)
        const Act row = out + ((b * S + t) * H + h) * hd, brow = ob + ((b * S + t) * H + h) * hd;
        const bool in = (int)t >= q0 && (int)t < q0 + nq;
        if (!in) {
            if (!first) continue;
            for (int d = 0; d < hd; d++) row[d] = 0.0f;
            lse[i] = -INFINITY;
            continue;
        }
        const float lo = first ? -INFINITY : lse[i], ln = st[(b * H + h) * nq + t - q0];
        const float mx = fmaxf(lo, ln), wo = lo == -INFINITY ? 0.0f : expf(lo - mx), wn = expf(ln - mx);
        const float inv = 1.0f / (wo + wn);
        for (int d = 0; d < hd; d++) row[d] = ((wo > 0.0f ? wo * (float)row[d] : 0.0f) + wn * (float)brow[d]) * inv;
        lse[i] = mx + logf(wo + wn);
    }
}

// dst += src over rows [r0, r0 + nr) of (B, S, width) activations
__global__ void block_add_kernel(Act dst, Act src, int S, int width, int r0, int nr, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t w = i % width, t = i / width % nr, b = i / ((size_t)width * nr);
        const size_t e = (b * S + r0 + t) * width + w;
        dst[e] = (float)dst[e] + (float)src[e];
    }
}

// the block's rows of lse (B, H, S) packed as Stats (B, H, nq)
__global__ void block_stats_kernel(float *st, const float *lse, int S, int q0, int nq, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st[i] = lse[i / nq * S + q0 + i % nq];
}

// counted among the activations, as fsdpc plan counts them (kern_ring_scratch_bytes)
ScratchBuf block_act_buf{nullptr, 0, KERN_MEM_ACTIVATIONS}, block_stats_buf{nullptr, 0, KERN_MEM_ACTIVATIONS};

// the blocks' scratch for a rank's T queries (Tq) and keys (Tk), nq of them in the block: the
// forward's output in bf16, the backward's dQ, dK and dV (each 256-byte aligned); Stats, and in
// backward Sum, fp32
size_t block_out_bytes(int B, int Tq, int H, int hd) { return (size_t)B * Tq * H * hd * sizeof(uint16_t); }
size_t block_grads_bytes(int B, int Tq, int Tk, int H, int KV, int hd) {
    return ((size_t)B * Tq * H * hd + 2 * (size_t)B * Tk * KV * hd) * sizeof(uint16_t) + 256 * 3;
}
size_t block_stats_bytes(int bwd, int B, int H, int nq) { return (bwd ? 2 : 1) * sizeof(float) * B * H * nq; }

// The rule by which cuDNN takes ring blocks (kernels.h kern_ring_scratch_bytes), for the run's
// blocks and a plan's memory alike: attention chose cuDNN, bf16 activations and products, and no
// per-token mask (documents: masked; a window). Attention dropout and shapes cuDNN refuses are
// the blocks' own (block_takes).
bool ring_rule(bool masked, int window, bool bf16) {
    return att_choice != ATT_NATIVE && !masked && window <= 0 && bf16 && cuda_ctx.compute != COMPUTE_FP32;
}

// whether cuDNN takes this block, and its geometry
bool block_takes(int bwd, Act x, int B, int Tq, int Tk, int H, int KV, int hd, const KernBlock *blk,
                 const int32_t *qfirst, int window, const AttDrop *drop, Plan **plan) {
    if (!blk || !ring_rule(qfirst != nullptr, window, x.bf16) || !chosen(drop)) {
        if (blk && !x.bf16) fallback_once(FB_RING_FP32);
        return false;
    }
    return takes(bwd, 0, B, Geo{blk->nq, blk->nk, Tq, Tk, blk->causal != 0}, H, KV, hd, nullptr, plan);
}

void launch_add(Act dst, Act src, int B, int S, int width, int r0, int nr) {
    const size_t n = (size_t)B * nr * width;
    block_add_kernel<<<grid_for(n, kBlockThreads), kBlockThreads, 0, cuda_stream()>>>(dst, src, S, width, r0, nr, n);
    cudaCheckLaunch();
}

}  // namespace

bool cudnn_att_block_fwd(Act out, float *lse, Act q, Act k, Act v, int B, int Tq, int Tk, int H, int KV, int hd,
                         const KernBlock *blk, const int32_t *qfirst, int window, const AttDrop *drop, bool first) {
    Plan *plan;
    if (!block_takes(0, q, B, Tq, Tk, H, KV, hd, blk, qfirst, window, drop, &plan)) return false;
    const size_t qrow = (size_t)H * hd;
    Act ob{block_act_buf.get(block_out_bytes(B, Tq, H, hd)), 1};
    float *st = (float *)block_stats_buf.get(block_stats_bytes(0, B, H, blk->nq));
    float scale = 1.0f / sqrtf((float)hd), neg_inf = masked_score();
    const size_t q0 = (size_t)blk->q0 * qrow;
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
    void *const ptrs[] = {(q + q0).p, k.p, v.p, (ob + q0).p, st, &scale, &neg_inf};
    execute(*plan, uids, ptrs, blk->causal ? 7 : 6, plan_workspace(*plan, 0));  // a rectangle masks nothing
    const size_t rows = (size_t)B * H * Tq;
    block_merge_kernel<<<grid_for(rows, kBlockThreads), kBlockThreads, 0, cuda_stream()>>>(
        out, lse, ob, st, Tq, H, hd, blk->q0, blk->nq, first, rows);
    cudaCheckLaunch();
    return true;
}

bool cudnn_att_block_bwd(Act dq, Act dk, Act dv, Act dout, Act out, const float *lse, Act q, Act k, Act v, int B, int Tq,
                         int Tk, int H, int KV, int hd, const KernBlock *blk, const int32_t *qfirst, int window,
                         const AttDrop *drop) {
    Plan *plan;
    if (!block_takes(1, q, B, Tq, Tk, H, KV, hd, blk, qfirst, window, drop, &plan)) return false;
    const size_t qrow = (size_t)H * hd, kvrow = (size_t)KV * hd, nq = (size_t)B * Tq * qrow, nkv = (size_t)B * Tk * kvrow;
    const size_t nst = (size_t)B * H * blk->nq, q0 = (size_t)blk->q0 * qrow;
    // dQ, dK, dV of the block in the callers' layouts, then Stats and Sum
    char *base = (char *)block_act_buf.get(block_grads_bytes(B, Tq, Tk, H, KV, hd));
    Act gq{base, 1}, gk{base + (nq * 2 + 255) / 256 * 256, 1};
    Act gv{(char *)gk.p + (nkv * 2 + 255) / 256 * 256, 1};
    float *st = (float *)block_stats_buf.get(block_stats_bytes(1, B, H, blk->nq)), *sum = st + nst;
    block_stats_kernel<<<grid_for(nst, kBlockThreads), kBlockThreads, 0, cuda_stream()>>>(st, lse, Tq, blk->q0, blk->nq, nst);
    cudaCheckLaunch();
    float scale = 1.0f / sqrtf((float)hd), neg_inf = masked_score(), one = 1.0f;
    const size_t acc_bytes = dq_accum_bytes(B, blk->nq, H, hd);
    char *ws = plan_workspace(*plan, acc_bytes), *acc = ws + ws_head(plan->workspace);
    if (dnn.cudnnGetVersion() < 90600) cudaCheck(cudaMemsetAsync(acc, 0, acc_bytes, cuda_stream()));  // as cudnn_att_bwd
    int64_t uids[16] = {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_SUM, UID_DQ, UID_DK, UID_DV, UID_DQ_ACCUM,
                        UID_SCALE, UID_ONE};
    void *ptrs[16] = {(q + q0).p, k.p, v.p, (out + q0).p, (dout + q0).p, st, sum, (gq + q0).p, gk.p, gv.p, acc, &scale,
                      &one};
    int n = 13;
    if (blk->causal || plan->seq_len) uids[n] = UID_NEG_INF, ptrs[n++] = &neg_inf;  // a mask's masked score
    if (plan->seq_len) {  // the padding mask of whole lengths (bwd_pads_t)
        uids[n] = UID_SEQ_Q, ptrs[n++] = plan->seq_len;
        uids[n] = UID_SEQ_KV, ptrs[n++] = plan->seq_len_kv;
    }
    execute(*plan, uids, ptrs, n, ws);
    launch_add(dq, gq, B, Tq, (int)qrow, blk->q0, blk->nq);
    launch_add(dk, gk, B, Tk, (int)kvrow, 0, blk->nk);
    launch_add(dv, gv, B, Tk, (int)kvrow, 0, blk->nk);
    return true;
}

// kern_ring_scratch_bytes: the most the blocks above hold, each buffer at its largest call (a
// rank's own block has all T queries; backward's buffers are forward's and more)
extern "C" size_t cuda_ring_scratch_bytes(int B, int T, int H, int KV, int hd, int docs, int window, int fwd_only) {
    if (!ring_rule(docs != 0, window, cuda_ctx.acts_bf16 != 0)) return 0;
    if (fwd_only) return block_out_bytes(B, T, H, hd) + block_stats_bytes(0, B, H, T);
    return block_grads_bytes(B, T, T, H, KV, hd) + block_stats_bytes(1, B, H, T);
}
