#!/usr/bin/env bash
# run/gpu-bundle.sh's bundle where nothing else can help it: built from this build (a CPU-only
# ./fsdpc is accepted in its test mode), then unpacked and used inside a root (chroot, /proc, /sys
# and /dev bound in a mount namespace of its own) that holds glibc, the bundle and stubs of the
# GPU machine's CUDA libraries (their SONAMEs, versions and symbols, doing nothing: no GPU is
# visible), and for the install line alone a shell and the tools it calls. The install line
# unpacks, exports and puts the binaries in place, names a missing library and fails, refuses an
# older glibc; then, the tools gone, ./fsdpc --version, build/test_gpu, a one-step CPU run (a
# singleton and under the bundle's mpirun -np 2) all start. The bundle stays under 48 MiB.
cd "$(dirname "$0")/../.."
source test/lib.sh
PREFIX="gpu bundle: "
skip() { echo "# SKIP gpu bundle tests: $*"; exit 0; }

[ -x ./fsdpc ] || skip "no ./fsdpc (make fsdpc)"
R=$W/root  # the machine: / inside
UNSHARE="unshare -m"
[ "$(id -u)" = 0 ] || UNSHARE="unshare -r -m"  # a user namespace makes this user root in it
$UNSHARE true 2>/dev/null || skip "no mount namespace here ($UNSHARE: $($UNSHARE true 2>&1 | head -1))"
mkdir -p "$R/w" "$R/lib64" "$R/lib/x86_64-linux-gnu" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/stubs"
chmod 1777 "$R/tmp"

t0=$SECONDS
GPU_BUNDLE_TEST=1 GPU_BUNDLE_DIR="$R/w/.gpu" bash run/gpu-bundle.sh >"$W/bundle.out" 2>&1
rc=$?
carried=$(du -cb "$R"/w/.gpu/* 2>/dev/null | tail -1 | cut -f1)
[ $rc = 0 ] && [ -n "$carried" ] && [ "$carried" -le $((48 * 1048576)) ] && grep -q '^\. .*/\.gpu/install\.sh$' "$W/bundle.out" &&
    grep -Eq '^gpu-bundle: needs glibc >= 2\.[0-9]+ \(for .+\)' "$W/bundle.out"
check "bundled in $((SECONDS - t0)) s: $((${carried:-0} / 1048576)) MiB carried (limit 48), its glibc need and the install line printed" $? \
    "$(tail -5 "$W/bundle.out")"
[ $rc = 0 ] || exit 0

# glibc as every GPU machine has it (its own parts only), where the loader looks by default
for so in libc.so.6 libm.so.6 libmvec.so.1 libdl.so.2 libpthread.so.0 librt.so.1 libresolv.so.2 libutil.so.1; do
    cp -L "/lib/x86_64-linux-gnu/$so" "$R/lib/x86_64-linux-gnu/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"

# The stubs: each CUDA library the binaries link, with its SONAME, symbol version nodes and the
# functions the binaries call (by name prefix), each returning 0, which
# the CUDA runtime's registration at start-up takes as done and fsdpc as "no GPU, no driver"
BINS="./fsdpc $([ -x build/test_gpu ] && echo build/test_gpu)"
for lib in $(sed -n 's/^device_libs=//p' "$R/w/.gpu/manifest"); do
    case $lib in
    libcudart.*) re='^_*cuda' ;; *) re='^$' ;;  # cuBLASLt, NCCL and cuDNN are opened at run time: not linked
    esac
    nm -D --undefined-only $BINS | awk '{print $2}' | sed 's/@.*//' | grep -E "$re" | sort -u |
        sed 's/.*/int &(void) { return 0; }/' >"$W/$lib.c"
    vers=$(readelf -V $BINS | grep -A9 "File: $lib" | sed -nE 's/.*Name: ([^ ]+) +Flags.*/\1/p' | sort -u)
    for v in $vers; do echo "$v { global: *; };"; done >"$W/$lib.map"
    gcc -shared -fPIC -o "$R/stubs/$lib" -Wl,-soname,"$lib" $([ -s "$W/$lib.map" ] && echo "-Wl,--version-script=$W/$lib.map") \
        "$W/$lib.c" || echo "not ok - ${PREFIX}the stub of $lib did not build"
done

# inroot ENV_FILE CMD...: CMD inside the root, with only ENV_FILE's variables and HOME (/tmp)
inroot() {
    local envf=$1
    shift
    $UNSHARE sh -c 'r=$1; shift; for d in proc sys dev; do mount --rbind "/$d" "$r/$d" || exit 97; done
                    exec env -i HOME=/tmp $(cat "$0") /usr/sbin/chroot "$r" "$@"' "$envf" "$R" "$@"
}

# the install line, with a shell and its tools in the root (and in the root's library folder)
TOOLS="bash sh dirname sed getconf awk mawk grep head sort tail rm tar gzip cp mkdir cat ls ldd"
mkdir -p "$R/usr/bin" "$R/bin"
for t in $TOOLS; do
    p=$(command -v $t) || continue
    cp -L "$p" "$R/usr/bin/$t"
    ldd "$p" 2>/dev/null | awk '$3 ~ /^\// {print $3}' | while read -r l; do
        [ -e "$R/lib/x86_64-linux-gnu/${l##*/}" ] || { cp -L "$l" "$R/lib/x86_64-linux-gnu/" && echo "${l##*/}" >>"$W/toollibs"; }
    done
done
ln -sf /usr/bin/bash "$R/bin/bash" && ln -sf /usr/bin/sh "$R/bin/sh"
echo "PATH=/usr/bin:/bin FSDPC_CUDA_LIBS=/stubs" >"$W/install.env"
cp "$R/w/.gpu/manifest" "$W/manifest"
install_line() { inroot "$W/install.env" /usr/bin/bash -c "cd /w && . .gpu/install.sh" >"$W/install.out" 2>&1; }

install_line
rc=$?
ok=0
[ $rc = 0 ] && [ -x "$R/w/fsdpc" ] && cmp -s ./fsdpc "$R/w/fsdpc" && grep -q '^gpu bundle: ready: ./fsdpc' "$W/install.out" &&
    grep -q '^  MPI: Open MPI' "$W/install.out" && grep -q '^export OPAL_PREFIX=' "$R/w/.gpu/env" || ok=1
[ -x build/test_gpu ] && ! cmp -s build/test_gpu "$R/w/build/test_gpu" && ok=1
for lib in $(sed -n 's/^device_libs=//p' "$W/manifest"); do
    grep -q "^gpu bundle: $lib => /stubs/$lib\$" "$W/install.out" || ok=1
done
grep -q '^gpu bundle: libcudnn.so.9 => not found (--attention auto runs the native kernels)$' "$W/install.out" || ok=1
# cuBLASLt and NCCL, opened at run time, are not in the root: ldd cannot see that, --version does
if [ -x build/test_gpu ]; then
    grep -q '^gpu bundle: warning: cuBLASLt: none (cannot load libcublasLt' "$W/install.out" &&
        grep -q '^gpu bundle: warning: NCCL: none' "$W/install.out" || ok=1
fi
check "the install line unpacks, exports, puts the binaries in place, says where the CUDA libraries are found, runs ./fsdpc --version and warns of cuBLASLt and NCCL it cannot load (exit $rc)" \
    $ok "$(tail -12 "$W/install.out")"

# a library the machine lacks: named with what needs it, and the line fails
first=$(sed -n 's/^device_libs=//p' "$W/manifest" | awk '{print $1}')
if [ -n "$first" ]; then
    mv "$R/stubs/$first" "$W/"
    install_line
    rc=$?
    [ $rc != 0 ] && grep -q '^gpu bundle: missing libraries:$' "$W/install.out" &&
        grep -Eq "^  $first \(needed by fsdpc" "$W/install.out"
    check "a missing $first is named with what needs it, and the line fails (exit $rc)" $? "$(tail -4 "$W/install.out")"
    mv "$W/$first" "$R/stubs/"
fi
# an older glibc than the bundle needs: refused before anything is unpacked
sed -i 's/^glibc=.*/glibc=99.0/' "$R/w/.gpu/manifest"
install_line
rc=$?
[ $rc != 0 ] && grep -q "^gpu bundle: this machine's glibc 2\.[0-9]* is older than the 99.0 the bundle needs" "$W/install.out"
check "a glibc older than the bundle's need is refused by name (exit $rc)" $? "$(tail -3 "$W/install.out")"
cp "$W/manifest" "$R/w/.gpu/manifest"
install_line || echo "not ok - ${PREFIX}the install line again: $(tail -3 "$W/install.out")"

# Now only glibc, the bundle and the stubs: the tools, their libraries and the shell go
rm -rf "$R/usr" "$R/bin"
while read -r l; do rm -f "$R/lib/x86_64-linux-gnu/$l"; done <"$W/toollibs"
# the exports as NAME=VALUE words (the root's paths hold no blanks)
env -i bash -c '. "$1"; env' sh "$R/w/.gpu/env" | grep -vE '^(PWD|SHLVL|_)=' >"$W/bundle.env"
: >"$W/empty.env"

inroot "$W/empty.env" /w/fsdpc --version >"$W/bare.out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q 'error while loading shared libraries' "$W/bare.out"
check "without the bundle's LD_LIBRARY_PATH ./fsdpc does not start there (the root holds no other libraries; exit $rc)" $? \
    "$(head -2 "$W/bare.out")"

inroot "$W/bundle.env" /w/fsdpc --version >"$W/version.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q '^MPI: Open MPI v4' "$W/version.out" && grep -q '^CUDA backend: ' "$W/version.out" &&
    { ! grep -q '^CUDA backend: built in' "$W/version.out" || grep -q '^GPUs visible: 0$' "$W/version.out"; }
check "./fsdpc --version starts on glibc, the bundle and the stubs alone (exit $rc)" $? "$(head -c 600 "$W/version.out")"

if [ -x "$R/w/build/test_gpu" ]; then
    inroot "$W/bundle.env" /w/build/test_gpu --version >"$W/tg.out" 2>&1 && inroot "$W/bundle.env" /w/build/test_gpu >>"$W/tg.out" 2>&1
    rc=$?
    [ $rc = 0 ] && grep -q '^cuBLASLt: ' "$W/tg.out" && grep -q '^# no GPU visible: skipped$' "$W/tg.out"
    check "build/test_gpu --version, and build/test_gpu (MPI_Init, then no GPU: skipped), start there (exit $rc)" $? "$(head -c 600 "$W/tg.out")"
else
    echo "# build/test_gpu is not built (a CPU-only build): the bundle holds ./fsdpc alone"
fi

M="--hidden_width 64 --num_layers 1 --num_heads 2 --intermediate_size 64 --max_context_width 16 --vocab_size 256 --batch_size 2
   --max_steps 1 --train_data synthetic --device cpu --num_tokens 0 --checkpoint_freq 0 --validation_freq 0"
inroot "$W/bundle.env" /w/fsdpc $M >"$W/step.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q '^Batch 1 Loss: [0-9.]*' "$W/step.out"
check "a one-step CPU run there, a singleton (exit $rc)" $? "$(tail -c 400 "$W/step.out")"
inroot "$W/bundle.env" /w/.gpu/mpi/bin/mpirun -np 2 /w/fsdpc $M >"$W/mpirun.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q '^fsdpc: 2 rank(s) on cpu' "$W/mpirun.out" && grep -q '^Batch 1 Loss: [0-9.]*' "$W/mpirun.out"
check "the same step on 2 ranks under the bundle's mpirun -np 2 (exit $rc)" $? "$(tail -c 500 "$W/mpirun.out")"
