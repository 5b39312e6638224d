#!/bin/bash
# test_ptxas: the attention kernels' ptxas report (nvcc -Xptxas -v) for sm_80 and sm_90. Every
# variant must be free of register spills, and the backward kernels (dK/dV, dQ) must fit at least
# 2 blocks per SM wherever their tile allows it: where two blocks' shared memory (plus the 1 KB per
# block the hardware reserves) fits the SM's 164 KB (sm_80) or 228 KB (sm_90). Blocks per SM come
# from the registers (64K per SM, allocated per warp in steps of 256), the shared memory (the
# kernels' SMEM template argument, in their names) and 2048 threads per SM. The report is kept in
# build/ptxas/ under a hash of the sources and of nvcc's version, so an unchanged tree is not
# compiled again. Without nvcc: one skipped line.
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then
    echo "ok - ptxas: attention kernels # SKIP no nvcc"
    exit 0
fi

SRC="kernels/cuda/attention.cu kernels/cuda/attention_tc.cu"
DEPS="$SRC kernels/cuda/attention.cuh kernels/cuda/common.cuh kernels/cuda/cudnn_attention.cuh base/rng.h kernels/kernels.h"
hash=$({ cat $DEPS; "$NVCC" --version; } | sha256sum | cut -c1-16)
mkdir -p build/ptxas
report=build/ptxas/$hash.log
if [ ! -f "$report" ]; then
    # device code only (-cubin), one process per file and architecture
    pids=""
    for f in $SRC; do
        for sm in 80 90; do
            "$NVCC" -std=c++17 -O3 -DFSDPC_CUDA -I. -cubin -gencode arch=compute_$sm,code=sm_$sm -Xptxas -v \
                "$f" -o "$W/$(basename "$f" .cu)_$sm.cubin" >"$W/$(basename "$f" .cu)_$sm.log" 2>&1 &
            pids="$pids $!"
        done
    done
    ok=0
    for p in $pids; do wait "$p" || ok=1; done
    if [ $ok != 0 ]; then
        check "ptxas: the attention sources compile for sm_80 and sm_90" 1 "($(grep -h -m3 error "$W"/*.log | head -c 300))"
        exit 1
    fi
    cat "$W"/*.log >"$W/all" && mv "$W/all" "$report"
fi

# one row per kernel and architecture: arch regs spill_stores spill_loads name
rows=$(awk '
    /Compiling entry function/ { match($0, /'\''[^'\'']+'\''/); name = substr($0, RSTART + 1, RLENGTH - 2)
                                 match($0, /sm_[0-9]+/); arch = substr($0, RSTART, RLENGTH) }
    /spill stores/ { st = $5; ld = $9 }
    /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1); print arch, r, st, ld, name }
' "$report" | while read -r arch r st ld name; do
    echo "$arch $r $st $ld $(echo "$name" | c++filt | sed -E 's/\(anonymous namespace\):://; s/\(.*//; s/ //g; s/^void//; s/ul>/>/')"
done | sort -k5,5 -k1,1)
n=$(echo "$rows" | grep -c .)
check "ptxas: the report lists the attention kernels ($n variants)" $([ "$n" -ge 100 ] && echo 0 || echo 1) "(only $n)"

# blocks per SM; "need" 2 for a backward kernel whose tile allows it, else 1
table=$(echo "$rows" | awk '
    function floor(x) { return x < 0 ? -int(-x) : int(x) }
    {
        arch = $1; regs = $2; st = $3; ld = $4; name = $5
        sm = arch == "sm_90" ? 228 * 1024 : 164 * 1024
        threads = name ~ /_tc_kernel/ ? 128 : 256   # kThreads, kAttThreads
        smem = 0
        if (match(name, /,[0-9]+>$/)) smem = substr(name, RSTART + 1, RLENGTH - 2) + 0
        warps = threads / 32
        per_warp = int((regs * 32 + 255) / 256) * 256
        by_regs = floor(floor(65536 / per_warp) / warps)
        by_smem = smem > 0 ? floor(sm / (smem + 1024)) : 32
        by_threads = floor(2048 / threads)
        blocks = by_regs; if (by_smem < blocks) blocks = by_smem; if (by_threads < blocks) blocks = by_threads
        bwd = name ~ /att_bwd_(dkdv|dq)/
        need = bwd && 2 * (smem + 1024) <= sm ? 2 : 1
        bad = (st > 0 || ld > 0 || blocks < need) ? "FAIL" : ""
        printf "%-5s %4d %5d %5d %7.1f %6s %4s %s %s\n", arch, regs, st, ld, smem / 1024, blocks, need, name, bad
    }')
echo "# arch  regs spill-st spill-ld smem-KB blocks/SM need kernel"
echo "$table" | sed 's/^/# /'
spills=$(echo "$table" | awk '$3 > 0 || $4 > 0' | wc -l)
check "ptxas: no attention kernel spills registers on sm_80 or sm_90" $([ "$spills" = 0 ] && echo 0 || echo 1) \
    "($spills variants spill: $(echo "$table" | awk '$3 > 0 || $4 > 0 { printf "%s %s; ", $1, $8 }' | head -c 400))"
low=$(echo "$table" | awk '$6 < $7' | wc -l)
check "ptxas: backward kernels reach 2 blocks per SM where their tile allows" $([ "$low" = 0 ] && echo 0 || echo 1) \
    "($low below: $(echo "$table" | awk '$6 < $7 { printf "%s %s (%s blocks); ", $1, $8, $6 }' | head -c 400))"
bwd=$(echo "$table" | awk '$8 ~ /att_bwd_(dkdv|dq)/' | wc -l)
check "ptxas: the table covers the backward kernels ($bwd variants)" $([ "$bwd" -ge 100 ] && echo 0 || echo 1)
# the 1B benchmark's head dim: its bf16 dK/dV kernel must keep two blocks (8 warps) per Hopper SM
hd128=$(echo "$table" | awk '$1 == "sm_90" && $8 ~ /att_bwd_dkdv_tc_kernel<128,/ { n++; if ($6 >= 2) ok++ } END { print ok + 0, n + 0 }')
check "ptxas: the bf16 dK/dV kernel at head dim 128 runs 2 blocks per SM on sm_90 (${hd128#* } variants)" \
    $([ "${hd128% *}" = "${hd128#* }" ] && [ "${hd128#* }" -ge 4 ] && echo 0 || echo 1) "(${hd128% *} of ${hd128#* } do)"
