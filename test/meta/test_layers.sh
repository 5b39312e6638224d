#!/bin/bash
# test_layers: make check-layers on this tree (includes and calls only go down the layers: base ->
# kernels -> comm -> model -> shard -> data/ckpt -> run -> main), and on planted violations, which
# it must catch: a wrong include in a copy of the sources, and a wrong call between two objects,
# between layers and between data/'s stages;
# no function in run/ over 80 lines; and nothing below run/ ending the job (check_exits.py).
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
BUILD=$(cat build/flavor)

out=$(/usr/bin/python3 test/meta/check_layers.py --objects "$BUILD" . 2>&1)
check "layers: this tree's includes and calls keep to the order" $? "($(echo "$out" | head -3 | tr '\n' '|'))"

# a planted include: kernels/ reaching up into model/
mkdir -p "$W/tree"
for d in base kernels comm model shard data ckpt run; do cp -r "$d" "$W/tree/"; done
cp main.c "$W/tree/"
sed -i '0,/^#include/s//#include "..\/model\/model.h"\n#include/' "$W/tree/kernels/dispatch.c"
out=$(/usr/bin/python3 test/meta/check_layers.py "$W/tree" 2>&1)
rc=$?
[ $rc = 1 ] && echo "$out" | grep -q 'kernels/dispatch.c:[0-9]*: includes ../model/model.h (model), above its own layer (kernels)'
check "layers: a planted include of model/ from kernels/ fails the check, named" $? "(rc=$rc: $(echo "$out" | head -2 | tr '\n' '|'))"
# an include from the root (-I.) is resolved too
sed -i '0,/^#include/s//#include "run\/train.h"\n#include/' "$W/tree/shard/shard.c"
out=$(/usr/bin/python3 test/meta/check_layers.py "$W/tree" 2>&1)
echo "$out" | grep -q 'shard/shard.c:[0-9]*: includes run/train.h (run), above its own layer (shard)'
check "layers: a planted root-relative include of run/ from shard/ is named" $? "($(echo "$out" | head -2 | tr '\n' '|'))"

# the graph, not only the order: data/ does not use shard/, below it
sed -i '0,/^#include/s//#include "..\/..\/shard\/shard.h"\n#include/' "$W/tree/data/loader/loader.c"
out=$(/usr/bin/python3 test/meta/check_layers.py "$W/tree" 2>&1)
echo "$out" | grep -q 'data/loader/loader.c:[0-9]*: includes ../../shard/shard.h (shard), which data does not use (it uses base, comm)'
check "layers: a planted include of shard/ from data/ (a lower layer the graph does not give it) is named" $? "($(echo "$out" | head -3 | tr '\n' '|'))"
# nor model/: the option enums data/ reads are its own (run/config.h gathers the sections)
sed -i '0,/^#include/s//#include "..\/..\/model\/config.h"\n#include/' "$W/tree/data/text/chat.c"
out=$(/usr/bin/python3 test/meta/check_layers.py "$W/tree" 2>&1)
echo "$out" | grep -q 'data/text/chat.c:[0-9]*: includes ../../model/config.h (model), which data does not use (it uses base, comm)'
check "layers: a planted include of model/ from data/ is named" $? "($(echo "$out" | head -3 | tr '\n' '|'))"

# data/'s stages: a planted include of the loader's header from format/ (a later stage) is named
sed -i '0,/^#include/s//#include "..\/loader\/pack.h"\n#include/' "$W/tree/data/format/arrow.c"
out=$(/usr/bin/python3 test/meta/check_layers.py "$W/tree" 2>&1)
echo "$out" | grep -q 'data/format/arrow.c:[0-9]*: includes ../loader/pack.h (data/loader), above its own stage (data/format)'
check "layers: a planted include of data/loader from data/format fails the check, named" $? "($(echo "$out" | head -3 | tr '\n' '|'))"

# a planted family name in ckpt/ (families are described in model/ only)
cp -r ckpt/. "$W/tree/ckpt/" && sed -i '0,/^#include/s//\/\/ a Llama checkpoint\n#include/' "$W/tree/ckpt/ckpt.c"
out=$(/usr/bin/python3 test/meta/check_layers.py "$W/tree" 2>&1)
echo "$out" | grep -q "ckpt/ckpt.c:[0-9]*: names the model family 'Llama' (families live in model/)"
check "layers: a planted family name in ckpt/ fails the check, named" $? "($(echo "$out" | head -3 | tr '\n' '|'))"

# a planted call: an object of base/ calling a function an object of comm/ defines
mkdir -p "$W/calls/src/base" "$W/calls/src/comm" "$W/calls/obj/base" "$W/calls/obj/comm"
echo 'int comm_planted(int x) { return x + 1; }' >"$W/calls/src/comm/planted.c"
printf 'int comm_planted(int x);\nint base_planted(int x) { return comm_planted(x); }\n' >"$W/calls/src/base/planted.c"
gcc -c "$W/calls/src/comm/planted.c" -o "$W/calls/obj/comm/planted.o" && gcc -c "$W/calls/src/base/planted.c" -o "$W/calls/obj/base/planted.o"
out=$(/usr/bin/python3 test/meta/check_layers.py --objects "$W/calls/obj" "$W/calls/src" 2>&1)
rc=$?
[ $rc = 1 ] && echo "$out" | grep -q 'base/planted: calls comm_planted (comm/planted, comm), above its own layer (base)'
check "layers: a planted call from base/ into comm/ fails the check, named" $? "(rc=$rc: $(echo "$out" | head -2 | tr '\n' '|'))"
# a planted call between data/'s stages: text/ calling into rows/
mkdir -p "$W/stages/src/data/text" "$W/stages/src/data/rows" "$W/stages/obj/data/text" "$W/stages/obj/data/rows"
echo 'int rows_planted(int x) { return x + 1; }' >"$W/stages/src/data/rows/planted.c"
printf 'int rows_planted(int x);\nint text_planted(int x) { return rows_planted(x); }\n' >"$W/stages/src/data/text/planted.c"
gcc -c "$W/stages/src/data/rows/planted.c" -o "$W/stages/obj/data/rows/planted.o" &&
    gcc -c "$W/stages/src/data/text/planted.c" -o "$W/stages/obj/data/text/planted.o"
out=$(/usr/bin/python3 test/meta/check_layers.py --objects "$W/stages/obj" "$W/stages/src" 2>&1)
rc=$?
[ $rc = 1 ] && echo "$out" | grep -q 'data/text/planted: calls rows_planted (data/rows/planted, data/rows), above its own stage (data/text)'
check "layers: a planted call from data/text into data/rows fails the check, named" $? "(rc=$rc: $(echo "$out" | head -2 | tr '\n' '|'))"
# and the same call downward is fine
printf 'int base_low(int x) { return x; }\n' >"$W/calls/src/base/planted.c"
printf 'int base_low(int x);\nint comm_planted(int x) { return base_low(x); }\n' >"$W/calls/src/comm/planted.c"
gcc -c "$W/calls/src/comm/planted.c" -o "$W/calls/obj/comm/planted.o" && gcc -c "$W/calls/src/base/planted.c" -o "$W/calls/obj/base/planted.o"
/usr/bin/python3 test/meta/check_layers.py --objects "$W/calls/obj" "$W/calls/src" >/dev/null 2>&1
check "layers: a call from comm/ down into base/ passes" $?

# no function in run/ over 80 lines (check_functions.py), and a planted 81-line one fails it, named
out=$(/usr/bin/python3 test/meta/check_functions.py run 2>&1)
check "functions: none in run/ is over 80 lines" $? "($(echo "$out" | head -3 | tr '\n' '|'))"
mkdir -p "$W/funcs" && cp -r run "$W/funcs/"
{ echo 'int run_planted(int x) {'; for i in $(seq 79); do echo "    x += $i;"; done; echo '}'; } >>"$W/funcs/run/train.c"
out=$(/usr/bin/python3 test/meta/check_functions.py "$W/funcs/run" 2>&1)
rc=$?
[ $rc = 1 ] && echo "$out" | grep -q 'run/train.c:[0-9]*: run_planted is 81 lines, over 80'
check "functions: a planted 81-line function in run/ fails the check, named" $? "(rc=$rc: $(echo "$out" | head -2 | tr '\n' '|'))"

# nothing below run/ ends the job but base/err.h's listed exits (check_exits.py); a planted exit
# in data/ and a planted comm_fail_all in model/ fail it, named, and a listed one passes
out=$(/usr/bin/python3 test/meta/check_exits.py . 2>&1)
check "exits: nothing below run/ ends the job outside base/err.h's list" $? "($(echo "$out" | head -3 | tr '\n' '|'))"
mkdir -p "$W/exits" && for d in base kernels comm model shard data ckpt; do cp -r "$d" "$W/exits/"; done
printf 'void data_planted(void) { exit(3); }\n' >>"$W/exits/data/loader/loader.c"
printf 'void model_planted(void) { comm_fail_all("x"); /* exit(1) in a comment */ }\n' >>"$W/exits/model/model.c"
out=$(/usr/bin/python3 test/meta/check_exits.py "$W/exits" 2>&1)
rc=$?
[ $rc = 1 ] && [ "$(echo "$out" | wc -l)" = 2 ] && echo "$out" | grep -q '^data/loader/loader.c:[0-9]*: calls exit, which ends the job below run/' &&
    echo "$out" | grep -q '^model/model.c:[0-9]*: calls comm_fail_all'
check "exits: a planted exit in data/ and comm_fail_all in model/ fail the check, named (and nothing else)" $? "(rc=$rc: $(echo "$out" | head -3 | tr '\n' '|'))"
printf '// exit-ok data/loader/loader.c exit: planted\n' >>"$W/exits/base/err.h"
out=$(/usr/bin/python3 test/meta/check_exits.py "$W/exits" 2>&1)
[ "$(echo "$out" | grep -c .)" = 1 ] && ! echo "$out" | grep -q loader.c
check "exits: an exit listed in base/err.h passes" $? "($(echo "$out" | head -3 | tr '\n' '|'))"

# a machine without the toolchain: plain make says, in one line, what installs it (not Error 127)
out=$(env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make --no-print-directory -n CC=fsdpc-no-such-mpicc 2>&1)
rc=$?
[ $rc != 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q 'fsdpc-no-such-mpicc not found: run `make deps` first'
check "build: plain make without mpicc says to run make deps, in one line" $? "(rc=$rc: $out)"
