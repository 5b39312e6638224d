#!/usr/bin/env bash
# Packs what a GPU machine needs to run ./fsdpc and build/test_gpu (a CUDA build from this machine)
# into .gpu/, to be carried there: every shared library the binaries and Open MPI's plugins load,
# found by ldd, less what the GPU machine provides itself (the CUDA driver and runtime, cuBLAS and
# cuBLASLt, NCCL, cuDNN, NVRTC: its CUDA install or a Python environment's nvidia/*/lib; and glibc,
# whose parts must all come from one build: libc, libm, libdl, libpthread, librt, libresolv,
# libutil, the loader), copied under their SONAMEs into one folder that LD_LIBRARY_PATH names.
# Nothing is unpacked over /. Open MPI 4.1 also loads its components (MCA plugins, PMIx's) and
# reads its help texts and parameter file at run time: they travel too, and the environment points
# Open MPI there (OPAL_PREFIX and friends), with singletons that start no orted and an mpirun
# that launches locally (one machine). Prints the glibc the bundle needs (the highest GLIBC_x.y
# symbol version of any file in it), and the one line that installs it on the GPU machine:
# `. .gpu/install.sh` (run/gpu-bundle-install.sh: checks that glibc, unpacks, exports the
# environment, puts ./fsdpc and build/test_gpu in place, names any library still missing and fails).
#
# GPU_BUNDLE_DIR: where (default .gpu). GPU_BUNDLE_TEST=1 (test/gpu/test_bundle.sh): a CPU-only
# ./fsdpc is accepted, build/test_gpu is optional, and the archive is gzip -1 (seconds; xz -6
# takes minutes on 2 busy cores, for a 2.5x smaller file).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${GPU_BUNDLE_DIR:-.gpu}
TEST=${GPU_BUNDLE_TEST:-0}
LIMIT_MIB=48  # what the device tool carries: 64 MiB in all, the rest for the repository

BINS=(./fsdpc build/test_gpu)
[ "$TEST" = 1 ] && [ ! -x build/test_gpu ] && BINS=(./fsdpc)  # a CPU-only build has no test_gpu
for b in "${BINS[@]}"; do
    [ -x "$b" ] || { echo "gpu-bundle: $b is missing: make fsdpc build/test_gpu (with nvcc on PATH)" >&2; exit 1; }
done
# (cuBLASLt, NCCL and cuDNN are opened at run time: libcudart is the CUDA build's one linked library)
if [ "$TEST" != 1 ] && ! ldd ./fsdpc | grep -q 'libcudart\.'; then
    echo "gpu-bundle: ./fsdpc has no CUDA backend: rebuild with nvcc on PATH (make CUDA=1 fsdpc build/test_gpu)" >&2
    exit 1
fi

# provided by the GPU machine: the CUDA libraries, and glibc's own (one build with the loader)
DEVICE_RE='lib(cuda|cudart|cublas|cublasLt|nccl|cudnn[a-z_]*|nvrtc[a-z.-]*|nvJitLink|nvidia-[a-z-]+)\.so[.0-9]*'
# (glibc 2.36's SONAMEs; libnsl.so.2 and libcrypt are other packages)
GLIBC_RE='(ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libnsl\.so\.1|libBrokenLocale\.so\.1|libthread_db\.so\.1|libc_malloc_debug\.so\.0|libnss_[a-z]+\.so\.2)'

S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
B=$S/b  # the tree the archive holds, unpacked into $OUT on the GPU machine
mkdir -p "$B/lib" "$B/bin" "$B/mpi/bin" "$B/mpi/components" "$B/mpi/share" "$B/mpi/etc" "$B/pmix/components" "$B/pmix/share"
cp ./fsdpc "$B/bin/fsdpc"
[ -x build/test_gpu ] && [ "${#BINS[@]}" = 2 ] && cp build/test_gpu "$B/bin/test_gpu"

# Open MPI's own folders, where this build finds them
mpi_path() { ompi_info --path all 2>/dev/null | sed -nE "s/^ *$1: (.*)/\1/p" | head -1; }
PKGLIB=$(mpi_path Pkglibdir) PKGDATA=$(mpi_path Pkgdatadir) SYSCONF=$(mpi_path Sysconfdir)
[ -d "$PKGLIB" ] && [ -d "$PKGDATA" ] || { echo "gpu-bundle: ompi_info does not say where Open MPI's components are" >&2; exit 1; }
# the components, less the interconnect ones: this is one machine, and libfabric, UCX, verbs and
# PSM would bring their own plugins from system folders (Debian's parameter file turns most off)
for f in "$PKGLIB"/*.so; do
    case ${f##*/} in *ofi* | *ucx* | *openib* | *psm* | *verbs*) continue ;; esac
    cp "$f" "$B/mpi/components/"
done
cp -r "$PKGDATA"/. "$B/mpi/share/"
[ -f "$SYSCONF/openmpi-mca-params.conf" ] && cp "$SYSCONF/openmpi-mca-params.conf" "$B/mpi/etc/"
ORTERUN=$(readlink -f "$(command -v orterun || command -v mpirun.openmpi)")
cp "$ORTERUN" "$B/mpi/bin/orterun"
ln -s orterun "$B/mpi/bin/mpirun"
[ -x "$(dirname "$ORTERUN")/orted" ] && cp "$(dirname "$ORTERUN")/orted" "$B/mpi/bin/"
# PMIx (Open MPI's ext3x component links it) loads plugins and help texts of its own
PMIX_LIB=$(ldd "$PKGLIB"/mca_pmix_ext3x.so 2>/dev/null | awk '$1 ~ /^libpmix\.so/ {print $3}')
if [ -n "$PMIX_LIB" ]; then
    PMIX_PREFIX_HERE=$(dirname "$(dirname "$(readlink -f "$PMIX_LIB")")")
    [ -d "$PMIX_PREFIX_HERE/lib/pmix" ] && cp "$PMIX_PREFIX_HERE"/lib/pmix/*.so "$B/pmix/components/"
    [ -d "$PMIX_PREFIX_HERE/share/pmix" ] && cp -r "$PMIX_PREFIX_HERE/share/pmix"/. "$B/pmix/share/"
fi

# The closure: every library ldd resolves for the binaries and plugins (the binaries first, so
# their choice wins where a name resolves to two files), less the machine's own. ldd runs the
# loader once per file (a fifth of a second each on a busy machine), so a plugin whose direct
# needs (readelf's NEEDED) are all in the closure already is not asked again. A plugin with a
# library missing here is left out (Open MPI skips what it cannot load). ldd heads each file's
# list with "FILE:".
closure() { ldd "$@" 2>&1 | awk '/^\// {sub(/:$/, ""); f = $0; next} /not found/ {print f, $1, "-"; next}
                                  $2 == "=>" && $3 ~ /^\// {print f, $1, $3}'; }
closure "$B"/bin/* "$B"/mpi/bin/orterun $([ -e "$B/mpi/bin/orted" ] && echo "$B/mpi/bin/orted") >"$S/closure"
readelf -d "$B"/mpi/components/*.so "$B"/pmix/components/*.so 2>/dev/null |
    awk '/^File: / {f = $2; next} /\(NEEDED\)/ {gsub(/[][]/, "", $NF); print f, $NF}' >"$S/needed"
awk 'FILENAME == ARGV[1] {have[$2] = 1; next} !have[$2] && !($2 ~ /^'"$GLIBC_RE"'$/) {print $1}' "$S/closure" "$S/needed" | sort -u >"$S/ask"
[ -s "$S/ask" ] && closure $(cat "$S/ask") >>"$S/closure"
awk '$3 == "-" {print $1, $2}' "$S/closure" >"$S/notfound"
while read -r f so; do
    case $f in
    "$B"/bin/* | "$B"/mpi/bin/*) echo "gpu-bundle: ${f##*/} needs $so, which is missing here" >&2
        exit 1 ;;
    esac
    [ -e "$f" ] && echo "gpu-bundle: leaving out ${f##*/} (needs $so)" && rm "$f"
done <"$S/notfound"
# name path pairs, first seen first; then the machine's ones apart and the rest copied
awk 'FILENAME == ARGV[1] {skip[$1] = 1; next} !skip[$1] && $3 != "-" && !seen[$2]++ {print $2, $3}' "$S/notfound" "$S/closure" |
    grep -vE "^$GLIBC_RE " >"$S/libs" || true
grep -E "^$DEVICE_RE " "$S/libs" | cut -d' ' -f1 >"$S/device" || true
grep -vE "^$DEVICE_RE " "$S/libs" | while read -r so path; do cp -L "$path" "$B/lib/$so"; done

# glibc: the highest GLIBC_x.y any file asks for, and which files ask for it (one objdump for all,
# which heads each file's table with "FILE:     file format ...")
objdump -T "$B"/bin/* "$B"/lib/* "$B"/mpi/bin/orterun "$B"/mpi/bin/orted "$B"/mpi/components/*.so "$B"/pmix/components/*.so \
    2>/dev/null >"$S/symbols" || true
awk '/file format/ {f = $1; sub(/:$/, "", f); n = split(f, p, "/"); f = p[n]; next}
     match($0, /GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?/) {print substr($0, RSTART + 6, RLENGTH - 6), f}' "$S/symbols" | sort -u | sort -V >"$S/glibc"
GLIBC_NEED=$(tail -1 "$S/glibc" | cut -d' ' -f1)
GLIBC_WHO=$(awk -v v="$GLIBC_NEED" '$1 == v {print $2}' "$S/glibc" | sort -u | paste -sd' ')
if grep -q 'GLIBC_PRIVATE' "$S/symbols"; then
    echo "gpu-bundle: $(grep -B9999 GLIBC_PRIVATE "$S/symbols" | grep 'file format' | tail -1 | cut -d: -f1) uses GLIBC_PRIVATE (tied to this machine's glibc build)" >&2
    exit 1
fi

rm -rf "$OUT"
mkdir -p "$OUT"
if [ "$TEST" = 1 ]; then
    ARCHIVE=bundle.tar.gz
    tar -C "$B" -cf - . | gzip -1 >"$OUT/$ARCHIVE"
else
    ARCHIVE=bundle.tar.xz
    tar -C "$B" -cf - . | xz -6 -T0 >"$OUT/$ARCHIVE"
fi
cp run/gpu-bundle-install.sh "$OUT/install.sh"
{
    echo "archive=$ARCHIVE"
    echo "glibc=$GLIBC_NEED"
    echo "glibc_needed_by=$GLIBC_WHO"
    echo "device_libs=$(paste -sd' ' "$S/device")"
    echo "binaries=${BINS[*]}"
} >"$OUT/manifest"

bytes=$(du -cb "$OUT"/* | tail -1 | cut -f1)
echo "gpu-bundle: $OUT: $(ls "$B/lib" | wc -l) libraries, $(ls "$B/mpi/components" | wc -l) Open MPI components," \
    "$(du -sm "$B" | cut -f1) MiB unpacked, $((bytes / 1048576)) MiB carried ($ARCHIVE; limit $LIMIT_MIB MiB)"
echo "gpu-bundle: needs glibc >= $GLIBC_NEED (for $GLIBC_WHO); this machine has $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
echo "gpu-bundle: from the GPU machine: $(paste -sd' ' "$S/device") libcudnn.so.9 (optional, opened at run time), and glibc"
[ "$bytes" -le $((LIMIT_MIB * 1048576)) ] || { echo "gpu-bundle: $OUT is over $LIMIT_MIB MiB" >&2; exit 1; }
echo "On the GPU machine, with $OUT carried, in the repository's root:"
echo ". $OUT/install.sh"
