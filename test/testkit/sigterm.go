package testkit

import (
	"fmt"
	"strings"
)

// SigtermScript is a bash script that starts the shell command cmd in
// the background (its output discarded), waits up to 10 s for the shell
// condition ready to hold and 1 s more, sends cmd SIGTERM, and waits up to
// 30 s for it to end, killing it then and printing "alive"; last it prints
// "rc=STATUS ms=MILLISECONDS" (from the SIGTERM to the end). Read it with
// ParseSigterm.
func SigtermScript(cmd, ready string) string {
	return cmd + ` </dev/null >/dev/null 2>&1 & p=$!
for i in $(seq 100); do ` + ready + ` && break; sleep 0.1; done
sleep 1; start=$(date +%s%N); kill -TERM $p
for i in $(seq 300); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
kill -0 $p 2>/dev/null && { echo alive; kill -9 $p; }
wait $p; echo "rc=$? ms=$(( ($(date +%s%N)-start)/1000000 ))"`
}

// ParseSigterm reads SigtermScript's output: the command's exit status,
// how long after its SIGTERM it ended, and whether it still ran 30 s
// after it.
func ParseSigterm(out string) (rc, ms int, alive bool, err error) {
	i := strings.LastIndex(out, "rc=")
	if i < 0 {
		return 0, 0, false, fmt.Errorf("no rc= line in %q", out)
	}
	if _, err := fmt.Sscanf(out[i:], "rc=%d ms=%d", &rc, &ms); err != nil {
		return 0, 0, false, fmt.Errorf("%q: %w", out[i:], err)
	}
	return rc, ms, strings.Contains(out[:i], "alive"), nil
}
