#!/usr/bin/env bash
# Installs the Debian packages fsdpc builds, tests and runs with, when any is missing. The
# Dockerfile runs this same script, so the image and a bare machine install the same way.
#   install-deps.sh               everything: building and the test suite (make deps)
#   install-deps.sh build         what `make fsdpc` needs (the image's build stage)
#   install-deps.sh libs-of BIN   prints the packages that own BIN's shared libraries, one per
#                                 line (run where BIN was built: the build stage writes the
#                                 runtime stage's list with it)
#   install-deps.sh runtime LIST  the packages named in the file LIST, plus mpirun and ssh (the
#                                 MPI Operator's launcher reaches its workers over ssh)
#   install-deps.sh check [SET]   installs nothing: names what SET (all, build) lacks, fails if any
set -euo pipefail
pkgs="make gcc g++ perl zlib1g-dev libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libmpich-dev mpich libhdf5-mpich-dev libopenblas-openmp-dev libdnnl-dev python3-torch python3-h5py python3-numpy python3-matplotlib python3-protobuf libsentencepiece-dev sentencepiece python3-sentencepiece libpcre2-dev libutf8proc-dev clang libclang-rt-dev libsnappy-dev libzstd-dev liblz4-dev zstd lz4 bzip2 xz-utils zip python3-yaml"
# the part of pkgs that `make fsdpc` needs
build="make gcc g++ perl zlib1g-dev libopenmpi-dev openmpi-bin libhdf5-openmpi-dev libopenblas-openmp-dev libdnnl-dev libsentencepiece-dev libpcre2-dev libutf8proc-dev libsnappy-dev libzstd-dev liblz4-dev"
runtime="openmpi-bin openssh-client openssh-server"

usage() { echo "usage: $0 [build | runtime LIST | libs-of BINARY | check [all|build]]" >&2; exit 2; }

# the Debian package that owns a library path; ldd may name /lib/... where the package lists
# /usr/lib/... (merged /usr) or a symlink, so try those spellings too
owner() {
    local p
    for p in "$1" "/usr$1" "${1#/usr}" "$(readlink -f "$1")"; do
        dpkg-query -S "$p" 2>/dev/null | sed -n '1s/: .*//p' | grep . && return 0
    done
    return 1
}

libs_of() {
    [ -f "$1" ] || { echo "install-deps: '$1' is not a file" >&2; exit 1; }
    local out lib pkgs=""
    out=$(ldd "$1") || { echo "install-deps: ldd cannot read '$1'" >&2; exit 1; }
    if grep -q "not found" <<<"$out"; then
        echo "install-deps: '$1' lacks libraries here: $(grep "not found" <<<"$out" | awk '{print $1}' | tr '\n' ' ')" >&2
        exit 1
    fi
    for lib in $(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$out"); do
        # CUDA's libraries are outside dpkg's lists where CUDA came from NVIDIA's runfile; the
        # image's runtime base (nvidia/cuda ...-runtime) brings them
        owner "$lib" || echo "install-deps: no Debian package owns $lib; the base image must provide it" >&2
    done | sort -u
}

set_of() {
    case "$1" in
        all) echo "$pkgs" ;;
        build) echo "$build" ;;
        *) usage ;;
    esac
}

mode=${1:-all}
case "$mode" in
    all | build) pkgs=$(set_of "$mode") ;;
    runtime)
        [ -n "${2:-}" ] && [ -r "$2" ] || { echo "install-deps: runtime needs the package list that 'libs-of' wrote" >&2; exit 2; }
        pkgs="$runtime $(grep -v '^#' "$2" | tr '\n' ' ')" ;;
    libs-of)
        [ -n "${2:-}" ] || usage
        libs_of "$2"
        exit 0 ;;
    check) pkgs=$(set_of "${2:-all}") ;;
    *) usage ;;
esac

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ "$mode" = check ]; then
    [ -z "$missing" ] && { echo "install-deps: every package of '${2:-all}' is installed"; exit 0; }
    echo "install-deps: missing:$missing (run/install-deps.sh ${2:-} installs them)" >&2
    exit 1
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ -n "$missing" ]; then
    echo "installing:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# MPICH and Open MPI share Debian's mpicc/mpirun/mpiexec alternatives: ./fsdpc and the tests build
# and launch with Open MPI's, so they are pinned to it after an install (and put back if anything
# moved them); make MPI=mpich names MPICH's tools (mpicc.mpich, mpiexec.mpich) itself.
for alt in mpi mpirun "mpi-$(gcc -dumpmachine)"; do
    want=$(update-alternatives --list "$alt" 2>/dev/null | grep -m1 openmpi) || continue
    now=$(update-alternatives --query "$alt" | sed -n 's/^Value: //p')
    if [ "$now" != "$want" ] || [ -n "$missing" ]; then
        $SUDO update-alternatives --set "$alt" "$want" >/dev/null
    fi
done
