# The GPU machine's half of run/gpu-bundle.sh, copied into the bundle as install.sh. Sourced in
# the repository's root (`. .gpu/install.sh && make gpu-check`), so that what it exports stays:
# checks the machine's glibc against the bundle's need; unpacks the archive into the bundle's
# folder; exports LD_LIBRARY_PATH (the bundle's libraries, then the machine's CUDA libraries:
# FSDPC_CUDA_LIBS, the CUDA toolkit, the driver's folder, Python environments' nvidia/*/lib) and
# Open MPI's relocation (OPAL_PREFIX and friends, PMIx's plugin path, singletons without orted,
# a local mpirun, running as root allowed); writes the same exports to <bundle>/env, which a later
# shell sources instead; copies ./fsdpc and build/test_gpu into place; then names every library
# that is still missing (and which file needs it) and fails, or says where each of the machine's
# libraries was found and runs ./fsdpc --version. Returns non-zero on any failure.

# fsdpc_bundle_unpack ARCHIVE DIR: GNU tar picks the decompressor; a machine without xz has
# Python's tarfile
fsdpc_bundle_unpack() {
    tar -C "$2" -xf "$1" 2>"$2/unpack.err" && return 0
    local py
    for py in python3 /opt/torch/.venv/bin/python; do
        command -v "$py" >/dev/null || continue
        "$py" -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))' "$1" "$2" 2>>"$2/unpack.err" && return 0
    done
    echo "gpu bundle: cannot unpack $1: $(tail -2 "$2/unpack.err")" >&2
    return 1
}

fsdpc_bundle_install() {
    local dir here need have lib d missing f
    dir=$(cd "$(dirname "${BASH_SOURCE[0]:-.gpu/install.sh}")" && pwd) || return 1
    here=$(pwd)
    need=$(sed -n 's/^glibc=//p' "$dir/manifest")
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    [ -n "$have" ] || have=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
    if [ -z "$have" ]; then
        echo "gpu bundle: cannot tell this machine's glibc version (getconf GNU_LIBC_VERSION); the bundle needs $need" >&2
        return 1
    fi
    if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -1)" != "$have" ]; then
        echo "gpu bundle: this machine's glibc $have is older than the $need the bundle needs" \
            "(for $(sed -n 's/^glibc_needed_by=//p' "$dir/manifest")): build the bundle on an older system" >&2
        return 1
    fi
    local archive="$dir/$(sed -n 's/^archive=//p' "$dir/manifest")" stamp
    # unpacked once per archive (its size and time): sourcing again in a new shell is quick
    stamp=$(ls -l --time-style=+%s "$archive" 2>/dev/null | awk '{print $5, $6}')
    if [ -z "$stamp" ] || [ "$stamp" != "$(cat "$dir/unpacked" 2>/dev/null)" ] || [ ! -x "$dir/bin/fsdpc" ]; then
        rm -rf "$dir/lib" "$dir/bin" "$dir/mpi" "$dir/pmix" "$dir/unpacked"
        fsdpc_bundle_unpack "$archive" "$dir" || return 1
        echo "$stamp" >"$dir/unpacked"
    fi

    # the machine's CUDA libraries: named ones first, then the toolkit's, the driver's, and pip's
    local cuda=""
    for d in ${FSDPC_CUDA_LIBS//:/ } /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 \
        /usr/local/nvidia/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib /usr/local/lib/python3*/dist-packages/nvidia/*/lib; do
        [ -d "$d" ] && [[ ":$cuda:" != *":$d:"* ]] && cuda+="$d:"
    done
    local ld="$dir/lib:$cuda${LD_LIBRARY_PATH:-}"
    {
        echo "export LD_LIBRARY_PATH='${ld%:}'"  # an empty entry would mean the current folder
        echo "export PATH='$dir/mpi/bin:$PATH'"
        echo "export FSDPC_BUNDLE='$dir'"
        # Open MPI 4.1 from anywhere: its folders, no orted for a singleton, a local mpirun
        echo "export OPAL_PREFIX='$dir/mpi' OPAL_PKGLIBDIR='$dir/mpi/components' OPAL_PKGDATADIR='$dir/mpi/share' OPAL_SYSCONFDIR='$dir/mpi/etc'"
        echo "export PMIX_PREFIX='$dir/pmix' PMIX_MCA_mca_base_component_path='$dir/pmix/components'"
        echo "export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_plm=isolated OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    } >"$dir/env"
    . "$dir/env"
    cp "$dir/bin/fsdpc" "$here/fsdpc" || return 1
    if [ -x "$dir/bin/test_gpu" ]; then
        mkdir -p "$here/build" && cp "$dir/bin/test_gpu" "$here/build/test_gpu" || return 1
    fi

    if ! command -v ldd >/dev/null; then
        echo "gpu bundle: no ldd here: the libraries are checked by starting ./fsdpc --version only"
    else
        # the binaries are what needs the machine's libraries (the plugins' needs are all bundled)
        missing=$(for f in "$here/fsdpc" "$dir/bin/test_gpu" "$dir"/mpi/bin/orterun "$dir"/mpi/bin/orted; do
            [ -f "$f" ] && ldd "$f" 2>/dev/null | awk -v f="${f##*/}" '/not found/ {print $1 " (" f ")"}'
        done | sort -u | awk '{n[$1] = n[$1] ? n[$1] ", " substr($2, 2, length($2) - 2) : substr($2, 2, length($2) - 2)}
                               END {for (l in n) printf "%s (needed by %s)\n", l, n[l]}' | sort)
        if [ -n "$missing" ]; then
            echo "gpu bundle: missing libraries:" >&2
            echo "$missing" | sed 's/^/  /' >&2
            echo "gpu bundle: put their folders in FSDPC_CUDA_LIBS (colon-separated) and source $dir/install.sh again" >&2
            return 1
        fi
        for lib in $(sed -n 's/^device_libs=//p' "$dir/manifest"); do
            echo "gpu bundle: $lib => $(ldd "$here/fsdpc" "$dir/bin/test_gpu" 2>/dev/null | awk -v l="$lib" '$1 == l {print $3; exit}')"
        done
    fi
    # cuDNN is opened at run time (dlopen), so ldd cannot tell: look where the loader would
    local cudnn=""
    for d in ${LD_LIBRARY_PATH//:/ }; do [ -e "$d/libcudnn.so.9" ] && { cudnn=$d/libcudnn.so.9; break; }; done
    echo "gpu bundle: libcudnn.so.9 => ${cudnn:-not found (--attention auto runs the native kernels)}"
    if ! "$here/fsdpc" --version >"$dir/version.txt" 2>&1; then
        echo "gpu bundle: ./fsdpc --version failed:" >&2
        tail -15 "$dir/version.txt" >&2
        return 1
    fi
    sed 's/^/  /' "$dir/version.txt"
    # cuBLASLt and NCCL are opened at run time, so ldd cannot tell they are missing (a CPU run needs
    # neither, a single GPU no NCCL): a warning, and a GPU run stops with the same line
    grep -E '^(cuBLASLt|NCCL): none' "$dir/version.txt" | sed 's/^/gpu bundle: warning: /'
    echo "gpu bundle: ready: ./fsdpc$([ -x "$dir/bin/test_gpu" ] && echo " and build/test_gpu"); glibc $have (the bundle needs $need); a new shell: . $dir/env"
}
fsdpc_bundle_install
