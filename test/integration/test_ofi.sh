#!/usr/bin/env bash
# The libfabric path (AWS EFA): 2 ranks over Open MPI's cm PML with the ofi MTL on libfabric's tcp
# provider give the same losses as the default transport, and the start-up line names each.
# Where the ofi MTL cannot start here (not built in, libfabric or its tcp provider missing) it
# prints "# SKIP ofi: REASON" and exits 0.
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
skip() { echo "# SKIP ofi: $*"; exit 0; }

# Isolated singletons (no orted, as make test runs them) all take Open MPI's job family 0, whose
# folder ompi.HOST.UID/jf.0 one removes while another starts below it. fsdpc gives each its own
# session folder: a jf.0 that cannot be a folder stops none of them, 40 starting 4 at a time all
# start, and none is left behind.
mkdir -m 1777 "$W/session" "$W/session/ompi.$(hostname).$(id -u)"
touch "$W/session/ompi.$(hostname).$(id -u)/jf.0"
for i in $(seq 40); do
    (OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_orte_tmpdir_base=$W/session ./fsdpc plan --model_name llama2_7b --json >/dev/null 2>"$W/s$i.err"
     echo $? >"$W/s$i.rc") &
    [ "$(jobs -r | wc -l)" -ge 4 ] && wait -n
done
wait
bad=$(for i in $(seq 40); do [ "$(cat "$W/s$i.rc")" = 0 ] || echo "$i: $(grep -m1 -A2 'mkdir\|rror' "$W/s$i.err" | tr '\n' ' ' | head -c 200)"; done)
[ -z "$bad" ] && [ "$(cd "$W/session" && find . -mindepth 1)" = "./ompi.$(hostname).$(id -u)
./ompi.$(hostname).$(id -u)/jf.0" ]
check "40 concurrent isolated singletons all start, each in its own session folder (not Open MPI's shared jf.0), and leave none behind" $? \
    "$(echo "$bad" | head -2) $(cd "$W/session" && find . -mindepth 1 | head -5 | tr '\n' ' ')"

ompi_info 2>/dev/null | grep -qi 'MCA mtl: ofi' || skip "Open MPI has no ofi MTL (ompi_info)"
ldconfig -p 2>/dev/null | grep -q 'libfabric\.so' || skip "libfabric is not installed"
# Debian's openmpi-mca-params.conf excludes the ofi MTL and tcp is in the default provider
# exclusion list: the flags select both explicitly
OFI=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp)
FLAGS=(--tokenizer byte --hidden_width 64 --num_layers 2 --num_heads 4 --num_key_value_heads 2 --intermediate_size 128
       --max_context_width 64 --batch_size 2 --num_tokens 0 --max_steps 8 --checkpoint_freq 0)

$MPI -np 2 "${OFI[@]}" ./fsdpc "${FLAGS[@]}" --metrics_file "$W/ofi.jsonl" >"$W/ofi.out" 2>"$W/ofi.err"
rc=$?
if [ $rc != 0 ] && grep -Eqi 'cm cannot be selected|No components were able|fi_getinfo|OFI (call|failed)|provider' "$W/ofi.err"; then
    skip "the ofi MTL did not start: $(grep -Eim1 'cannot be selected|fi_getinfo|provider|No components' "$W/ofi.err")"
fi
check "ofi run exits 0" $rc "(rc=$rc: $(tail -c 300 "$W/ofi.err" | tr '\n' '|'))"
$MPI -np 2 ./fsdpc "${FLAGS[@]}" --metrics_file "$W/def.jsonl" >"$W/def.out" 2>"$W/def.err"
rc=$?
check "default run exits 0" $rc "(rc=$rc: $(tail -c 300 "$W/def.err" | tr '\n' '|'))"

d=$(rel_diff "$W/ofi.jsonl" "$W/def.jsonl" 8 1e-6)
check "ofi and default losses agree over 8 steps" $? "(worst relative difference $d)"

line=$(grep -m1 '^fsdpc: MPI transport ' "$W/ofi.err")
echo "# ofi:     $line"
echo "$line" | grep -q 'mtl=ofi' && echo "$line" | grep -q 'provider=tcp'
check "ofi run logs mtl=ofi provider=tcp" $? "(got '$line')"
[ "$(grep -c '^fsdpc: MPI transport ' "$W/ofi.err")" = 1 ]
check "the transport line is printed once" $?
line=$(grep -m1 '^fsdpc: MPI transport ' "$W/def.err")
echo "# default: $line"
[ -n "$line" ] && ! echo "$line" | grep -q ofi
check "default run logs a transport without ofi" $? "(got '$line')"
