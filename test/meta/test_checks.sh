#!/bin/bash
# test_checks: the suites' checks can fail. `check "NAME $(cmd)" $?` reads $? after NAME's command
# substitution, which sets it again (to cmd's status): such a check passes whatever it checks. The
# status must be taken first (ok=$?; check "NAME $(cmd)" $ok). The scan must catch a planted one.
cd "$(dirname "$0")/../.." || exit 1
source test/lib.sh
scan() { grep -rnE '^\s*check "([^"\\]|\\.)*\$\([^(]([^"\\]|\\.)*" \$\?' "$@" --include=*.sh; }
found=$(scan test)
[ -z "$found" ]
check "no check reads \$? after a command substitution in its name" $? "$(echo "$found" | head -3 | tr '\n' '|')"
mkdir -p "$W/t"
printf '%s\n' 'false' 'check "planted ($(true))" $?' >"$W/t/planted.sh"
[ -n "$(scan "$W/t")" ]
check "the scan finds a planted one" $?
