// test_comm: every collective of comm/ against values each rank can predict (run under mpirun).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/kernels.h"

static int failures;

static void report(int ok, const char *name) {
    if (comm_info.rank == 0) printf("%s - comm %s (np=%d)\n", ok ? "ok" : "not ok", name, comm_info.world);
    failures += !ok;
}

// all ranks agree that every rank passed
static int all_ok(int ok) {
    double bad = !ok;
    comm_allreduce_max_f64(comm_world(), &bad, 1);
    return bad == 0.0;
}

int main(int argc, char **argv) {
    comm_init(&argc, &argv);
    CommGroup *w = comm_world();
    int r = comm_info.rank, P = comm_info.world, ok;
    enum { N = 1000 };
    float *in = malloc(sizeof(float) * N * P), *out = malloc(sizeof(float) * N * P);
    uint16_t *hin = malloc(2 * N * P), *hout = malloc(2 * N * P);
    for (int i = 0; i < N; i++) in[i] = (float)(r * N + i);
    for (int blocking = 1; blocking >= 0; blocking--) {
        const char *mode = blocking ? "blocking" : "non-blocking";
        char name[64];
        if (blocking) comm_all_gather(w, in, out, N);
        else comm_wait(comm_all_gather_start(w, in, out, N));
        ok = 1;
        for (int i = 0; i < N * P; i++) ok &= out[i] == (float)i;
        snprintf(name, sizeof name, "all-gather %s", mode);
        report(all_ok(ok), name);

        for (int i = 0; i < N * P; i++) in[i] = (float)(i + r);  // sum over ranks: P*i + P(P-1)/2
        if (blocking) comm_reduce_scatter(w, in, out, N);
        else comm_wait(comm_reduce_scatter_start(w, in, out, N));
        ok = 1;
        for (int i = 0; i < N; i++) ok &= out[i] == (float)(P * (r * N + i) + P * (P - 1) / 2);
        snprintf(name, sizeof name, "reduce-scatter %s", mode);
        report(all_ok(ok), name);

        for (int i = 0; i < N; i++) out[i] = (float)(r + 1);
        if (blocking) comm_allreduce_sum_f32(w, out, N);
        else comm_wait(comm_allreduce_start(w, out, N));
        ok = 1;
        for (int i = 0; i < N; i++) ok &= out[i] == (float)(P * (P + 1) / 2);
        snprintf(name, sizeof name, "all-reduce %s", mode);
        report(all_ok(ok), name);

        for (int i = 0; i < N; i++) out[i] = r == P - 1 ? (float)i : -1.0f;
        if (blocking) comm_bcast_bytes(w, out, N * sizeof(float), P - 1);
        else comm_wait(comm_bcast_start(w, out, N, P - 1));
        ok = 1;
        for (int i = 0; i < N; i++) ok &= out[i] == (float)i;
        snprintf(name, sizeof name, "broadcast %s", mode);
        report(all_ok(ok), name);
        for (int i = 0; i < N; i++) in[i] = (float)(r * N + i);
    }
    // bf16: small integers are exact, so sums are predictable
    for (int i = 0; i < N * P; i++) in[i] = (float)(i % 64 + r);
    kern_f32_to_bf16(hin, in, (size_t)N * P);
    comm_wait(comm_reduce_scatter_bf16_start(w, hin, hout, N));
    kern_bf16_to_f32(out, hout, N);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= out[i] == (float)(P * ((r * N + i) % 64) + P * (P - 1) / 2);
    report(all_ok(ok), "bf16 reduce-scatter");
    comm_wait(comm_allreduce_bf16_start(w, hin, N));
    kern_bf16_to_f32(out, hin, N);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= out[i] == (float)(P * (i % 64) + P * (P - 1) / 2);
    report(all_ok(ok), "bf16 all-reduce");
    kern_f32_to_bf16(hin, in, N);
    comm_wait(comm_all_gather_bf16_start(w, hin, hout, N));
    ok = 1;
    for (int q = 0; q < P; q++)
        for (int i = 0; i < N; i++) {
            float x;
            kern_bf16_to_f32(&x, hout + q * N + i, 1);
            ok &= x == (float)(i % 64 + q);
        }
    report(all_ok(ok), "bf16 all-gather");
    // groups: shard groups of 2 consecutive ranks, replicas across them
    if (P % 2 == 0) {
        CommGroup *tg, *sg, *rg;
        comm_make_mesh(1, 2, &tg, &sg, &rg);
        report(all_ok(comm_group_size(tg) == 1 && comm_group_size(sg) == 2 && comm_group_rank(sg) == r % 2 &&
                      comm_group_size(rg) == P / 2 && comm_group_rank(rg) == r / 2),
               "shard/replica groups");
    }
    // the 2-D mesh at 4 ranks, tp 2 x shard 2: tp groups {0,1} {2,3}, shard groups {0,2} {1,3}, replicas alone;
    // each group's sum of world ranks tells its members apart
    if (P == 4) {
        CommGroup *tg, *sg, *rg;
        comm_make_mesh(2, 2, &tg, &sg, &rg);
        double ts = r, ss = r, rs = r;
        comm_allreduce_sum_f64(tg, &ts, 1);
        comm_allreduce_sum_f64(sg, &ss, 1);
        comm_allreduce_sum_f64(rg, &rs, 1);
        report(all_ok(comm_group_size(tg) == 2 && comm_group_rank(tg) == r % 2 && ts == (r / 2) * 4 + 1 &&
                      comm_group_size(sg) == 2 && comm_group_rank(sg) == r / 2 && ss == (r % 2) * 2 + 2 &&
                      comm_group_size(rg) == 1 && rs == r),
               "mesh tp 2 x shard 2: tp groups of consecutive ranks, shard groups across them");
        // cp groups at tp 2 x cp 2: the data-parallel ranks 0, 1 (world 0..3) with the same tp rank: {0,2} {1,3}
        CommGroup *cg;
        comm_make_cp_group(2, 2, &cg);
        double cs = r;
        comm_allreduce_sum_f64(cg, &cs, 1);
        report(all_ok(comm_group_size(cg) == 2 && comm_group_rank(cg) == r / 2 && cs == (r % 2) * 2 + 2),
               "cp groups at tp 2 x cp 2: consecutive data-parallel ranks with the same tp rank");
    }
    // the ring's shift: member i's floats reach member i + 1 (modulo the world), twice in a row
    float ring_out[3] = {(float)r, (float)r + 0.5f, (float)-r}, ring_in[3] = {-1, -1, -1};
    int ring_ok = 1;
    for (int s = 0; s < 2; s++) {
        comm_wait(comm_ring_shift_start(w, ring_out, ring_in, 3));
        const int from = ((r - s - 1) % P + P) % P;
        ring_ok &= ring_in[0] == (float)from && ring_in[1] == (float)from + 0.5f && ring_in[2] == (float)-from;
        memcpy(ring_out, ring_in, sizeof ring_in);
    }
    report(all_ok(ring_ok), "ring shift: each member receives the previous member's block, and passes it on");
    free(in);
    free(out);
    free(hin);
    free(hout);
    comm_finalize();
    return failures ? 1 : 0;
}
