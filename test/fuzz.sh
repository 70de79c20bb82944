#!/usr/bin/env bash
# test/fuzz.sh FUZZTIME PACKAGE:TARGET...: make fuzz. Each target runs
# for FUZZTIME; all of them run even when one fails.
#
# Go's fuzzing engine fails now and then with no bug behind it: a worker
# slow to answer its coordinator on a loaded machine is reported as
# "fuzzing process hung or terminated unexpectedly" (golang/go#56238), and
# -fuzztime can end with "context deadline exceeded" (golang/go#51484).
# A real finding is an input that fails again when replayed, so a failed
# run is judged by its input: each input the run wrote to
# PACKAGE/testdata/fuzz/TARGET/ is replayed by plain go test. One that
# fails again, or takes over SLOW seconds (a hang is a finding too), fails
# the target and stays there to be fixed and kept. One that passes is the
# engine's failure: it is removed, said, and the target runs once more,
# which must pass.
set -uo pipefail
fuzztime=${1:?usage: test/fuzz.sh FUZZTIME PACKAGE:TARGET...}
shift
go=${GO:-go}
slow=${SLOW:-5}

# once PACKAGE TARGET: one fuzzing run; prints the inputs it wrote, one a
# line, on fd 3.
once() {
	local pkg=$1 name=$2 dir=$1/testdata/fuzz/$2 before after
	before=$(ls "$dir" 2>/dev/null)
	"$go" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg"
	local rc=$?
	after=$(ls "$dir" 2>/dev/null)
	comm -13 <(printf '%s\n' "$before" | sort) <(printf '%s\n' "$after" | sort) | sed '/^$/d' >&3
	return $rc
}

# replay PACKAGE TARGET INPUT: 0 when the input passes, quickly, alone.
replay() {
	local pkg=$1 name=$2 in=$3 start end
	start=$(date +%s%N)
	if ! "$go" test -count=1 -run "^$name/$in\$" "$pkg"; then
		echo "fuzz: $name: input $in fails again when replayed: a real finding, kept in $pkg/testdata/fuzz/$name/"
		return 1
	fi
	end=$(date +%s%N)
	if (((end - start) / 1000000000 > slow)); then
		echo "fuzz: $name: input $in takes over ${slow}s when replayed: a hang, kept in $pkg/testdata/fuzz/$name/"
		return 1
	fi
	return 0
}

failed=() flaked=()
for t in "$@"; do
	pkg=${t%%:*} name=${t##*:}
	echo "fuzz: $name in $pkg for $fuzztime"
	new=$(once "$pkg" "$name" 3>&1 1>&2)
	rc=$?
	if ((rc == 0)); then
		continue
	fi
	real=0
	for in in $new; do
		if replay "$pkg" "$name" "$in"; then
			echo "fuzz: $name: input $in passes when replayed: the engine failed, not the code; removed"
			rm -f "$pkg/testdata/fuzz/$name/$in"
			rmdir --ignore-fail-on-non-empty "$pkg/testdata/fuzz/$name" "$pkg/testdata/fuzz" "$pkg/testdata" 2>/dev/null
		else
			real=1
		fi
	done
	if ((real)); then
		failed+=("$name")
		continue
	fi
	echo "fuzz: $name: the fuzzing engine failed with no input that fails (golang/go#56238, #51484): once more"
	if new=$(once "$pkg" "$name" 3>&1 1>&2); then
		flaked+=("$name")
		continue
	fi
	echo "fuzz: $name: failed twice${new:+; inputs written: $new}"
	failed+=("$name")
done
if ((${#flaked[@]})); then
	echo "fuzz: the engine failed once (no input that fails again) and passed the second time: ${flaked[*]}"
fi
if ((${#failed[@]})); then
	echo "fuzz: FAILED: ${failed[*]}"
	exit 1
fi
echo "fuzz: passed: $# targets"
