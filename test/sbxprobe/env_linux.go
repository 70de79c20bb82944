package main

// Rows 16 and 21-23: the environment (secrets, injection variables) and
// the process's identity and privileges (setuid, no_new_privs,
// capabilities, uids, Landlock).

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// timeoutSetuid bounds the setuid probe's run of su.
const timeoutSetuid = time.Second

// injectionVars make programs load code chosen by whoever sets them.
var injectionVars = []string{"LD_PRELOAD", "BASH_ENV", "NODE_OPTIONS", "PYTHONPATH"}

// envNames returns the sorted, distinct names of KEY=VALUE entries.
func envNames(entries []string) []string {
	seen := map[string]bool{}
	var names []string
	for _, e := range entries {
		name, _, _ := strings.Cut(e, "=")
		if name != "" && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// procSelfEnviron returns the entries of /proc/self/environ.
func procSelfEnviron() ([]string, error) {
	data, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00"), nil
}

// envVisible reports where the variable name can be seen.
func envVisible(name string) []string {
	var where []string
	if _, ok := os.LookupEnv(name); ok {
		where = append(where, "os.Environ")
	}
	if entries, err := procSelfEnviron(); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e, name+"=") {
				where = append(where, "/proc/self/environ")
				break
			}
		}
	}
	return where
}

// absentProbe is blocked iff the variable is visible nowhere.
func absentProbe(name string) Result {
	if where := envVisible(name); len(where) > 0 {
		return Result{Detail: name + " is set (seen in " + strings.Join(where, " and ") + ")"}
	}
	return Result{Blocked: true, Detail: name + " is not set"}
}

// envProbes is row 16: the names of the environment (never the values),
// the secrets that must be gone and the injection variables.
func (b *battery) envProbes() []probe {
	ps := []probe{{row: 16, name: "env-names", info: true, run: func() Result {
		names := envNames(os.Environ())
		return Result{Detail: fmt.Sprintf("%d variables: %s", len(names), strings.Join(names, " ")), List: names}
	}}}
	for _, n := range b.cfg.secretEnv {
		ps = append(ps, probe{row: 16, name: "secret-env " + n, run: func() Result { return absentProbe(n) }})
	}
	if len(b.cfg.secretEnv) == 0 {
		ps = append(ps, probe{row: 16, name: "secret-env", skip: "no --secret-env given"})
	}
	for _, n := range injectionVars {
		ps = append(ps, probe{row: 16, name: "env-absent " + n, run: func() Result { return absentProbe(n) }})
	}
	return ps
}

// parseStatus parses the "Key:\tvalue" lines of /proc/PID/status.
func parseStatus(data string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(data, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// selfStatus reads and parses /proc/self/status.
func selfStatus() (map[string]string, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	return parseStatus(string(data)), nil
}

// capsZero reports whether a hexadecimal capability mask is empty.
func capsZero(hex string) bool {
	v, err := strconv.ParseUint(hex, 16, 64)
	return err == nil && v == 0
}

// setuidBinaries are looked for in order.
var setuidBinaries = []string{"/usr/bin/su", "/bin/su"}

// privilegeProbes are rows 21 (setuid, no_new_privs, capabilities), 22
// (uids, informational) and 23 (Landlock ABI, informational).
func (b *battery) privilegeProbes() []probe {
	return []probe{
		{row: 21, name: "setuid su", run: b.setuidProbe},
		{row: 21, name: "no_new_privs", run: func() Result {
			st, err := selfStatus()
			if err != nil {
				return Result{Errno: errnoName(err), Detail: "read /proc/self/status: " + err.Error()}
			}
			v := st["NoNewPrivs"]
			return Result{Blocked: v == "1", Detail: "NoNewPrivs: " + v}
		}},
		{row: 21, name: "capabilities", run: func() Result {
			st, err := selfStatus()
			if err != nil {
				return Result{Errno: errnoName(err), Detail: "read /proc/self/status: " + err.Error()}
			}
			d := fmt.Sprintf("CapInh %s CapPrm %s CapEff %s CapBnd %s CapAmb %s",
				st["CapInh"], st["CapPrm"], st["CapEff"], st["CapBnd"], st["CapAmb"])
			return Result{Blocked: capsZero(st["CapEff"]) && capsZero(st["CapPrm"]), Detail: d}
		}},
		{row: 22, name: "uid", info: true, run: func() Result {
			uidMap, _ := readTrim("/proc/self/uid_map")
			gidMap, _ := readTrim("/proc/self/gid_map")
			return Result{Detail: fmt.Sprintf("uid %d euid %d gid %d egid %d; uid_map %q; gid_map %q",
				os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid(),
				strings.Join(strings.Fields(uidMap), " "), strings.Join(strings.Fields(gidMap), " "))}
		}},
		{row: 23, name: "landlock", info: true, run: func() Result {
			abi, _, e := unix.RawSyscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
			if e != 0 {
				return Result{Errno: errnoName(e), Detail: "Landlock unavailable: " + e.Error()}
			}
			return Result{Detail: fmt.Sprintf("Landlock ABI %d", abi)}
		}},
	}
}

// setuidProbe runs "su -c id root" with no input: blocked unless it prints
// uid=0.
func (b *battery) setuidProbe() Result {
	var bin string
	var mode os.FileMode
	for _, p := range setuidBinaries {
		if st, err := os.Stat(p); err == nil {
			bin, mode = p, st.Mode()
			break
		}
	}
	if bin == "" {
		return Result{Blocked: true, Detail: "no su binary found"}
	}
	out, err := runTimeout(min(b.inner(), timeoutSetuid), bin, "-c", "id", "root")
	d := fmt.Sprintf("%s (%v) -c id root: %q", bin, mode, firstLine(out))
	if err != nil {
		d += fmt.Sprintf(" (%v)", err)
	}
	if strings.Contains(out, "uid=0") {
		return Result{Detail: d + ": ran as root"}
	}
	return Result{Blocked: true, Errno: errnoName(err), Detail: d}
}
