// Package runstate is the runtime record a running soda-mcpd publishes,
// NAME.status.json: its live figures for "sodactl mcp list" and "status",
// and where it listens and which token file it checks, so that a server
// started by hand ("make run", "soda-mcpd --name NAME -- COMMAND"), with no
// /etc/soda/mcp/NAME.conf, can still be granted to a sandbox
// ("sodactl run --mcp NAME") and shown by "sodactl mcp status NAME".
//
// The record lives in the runtime directory: $RUNTIME_DIRECTORY under
// systemd (/run/soda/mcp), /run/soda/mcp for root in the foreground, and
// $XDG_RUNTIME_DIR/soda/mcp for other users. It is removed when soda-mcpd
// stops; one left by a killed soda-mcpd is recognised as stale because
// its process is gone (PID and start time are both recorded).
package runstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SystemDir is the runtime directory of soda-mcpd run by root or systemd.
const SystemDir = "/run/soda/mcp"

// Record is the content of NAME.status.json.
type Record struct {
	// PID is soda-mcpd's process ID.
	PID int `json:"pid"`
	// Start is the process's start time in clock ticks since boot
	// (field 22 of /proc/PID/stat), which tells it from a later process
	// that reuses the PID.
	Start uint64 `json:"start_time,omitempty"`
	// Name is the instance name (everything in soda-mcp@everything).
	Name string `json:"name,omitempty"`
	// Config is the configuration file served; empty for an ad-hoc server.
	Config string `json:"config,omitempty"`
	// Listen holds the TCP addresses (host:port) it serves.
	Listen []string `json:"listen,omitempty"`
	// Auth is false when the server runs with Auth=none.
	Auth bool `json:"auth"`
	// TokenFile is the absolute path of the bearer token file.
	TokenFile string `json:"token_file,omitempty"`
	// SocketActivated is true under systemd socket activation.
	SocketActivated bool `json:"socket_activated,omitempty"`

	// Sessions, Children, CallsPerMinute and Draining are the live
	// figures, rewritten when they change.
	Sessions       int   `json:"sessions"`
	Children       int64 `json:"children"`
	CallsPerMinute int64 `json:"calls_last_minute"`
	Draining       bool  `json:"draining"`
	// Updated is when the record was last written.
	Updated time.Time `json:"updated"`
}

// FileName is the record's name in its directory.
func FileName(name string) string { return name + ".status.json" }

// WriteDir is where this process, a soda-mcpd, publishes its record: the
// first entry of $RUNTIME_DIRECTORY when systemd set it; else SystemDir for
// root and $XDG_RUNTIME_DIR/soda/mcp for other users (created, mode 0750);
// "" when there is none.
func WriteDir() (string, error) {
	if dir := os.Getenv("RUNTIME_DIRECTORY"); dir != "" {
		return strings.Split(dir, ":")[0], nil
	}
	dir := SystemDir
	if os.Geteuid() != 0 {
		base := os.Getenv("XDG_RUNTIME_DIR")
		if base == "" {
			return "", nil
		}
		dir = filepath.Join(base, "soda", "mcp")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("create runtime directory: %w", err)
	}
	return dir, nil
}

// SearchDirs are the directories Lookup searches, in order: SystemDir,
// then, for a user other than root, $XDG_RUNTIME_DIR/soda/mcp.
func SearchDirs() []string {
	dirs := []string{SystemDir}
	if base := os.Getenv("XDG_RUNTIME_DIR"); base != "" && os.Geteuid() != 0 {
		dirs = append(dirs, filepath.Join(base, "soda", "mcp"))
	}
	return dirs
}

// Write replaces path with r atomically (a temporary file renamed over
// it), mode 0644.
func Write(path string, r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write runtime record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write runtime record: %w", err)
	}
	return nil
}

// Read reads the record at path.
func Read(path string) (Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ErrNotRunning is wrapped by Lookup's error when no live record exists.
var ErrNotRunning = errors.New("no soda-mcpd of that name is running")

// Lookup finds the record of a running soda-mcpd serving name in dirs
// (SearchDirs when nil) and returns it with its path. A record is only
// trusted when it is a regular file owned by root or by the caller,
// writable by its owner only, and its process still runs; otherwise the
// search goes on. The error wraps ErrNotRunning when none is found.
func Lookup(name string, dirs []string) (Record, string, error) {
	if dirs == nil {
		dirs = SearchDirs()
	}
	var why []string
	for _, dir := range dirs {
		path := filepath.Join(dir, FileName(name))
		r, err := readTrusted(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && !r.Alive() {
			err = fmt.Errorf("stale: process %d is gone", r.PID)
		}
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		return r, path, nil
	}
	ignored := ""
	if len(why) > 0 {
		ignored = "; ignored " + strings.Join(why, "; ")
	}
	return Record{}, "", fmt.Errorf("%w (no live %s in %s)%s", ErrNotRunning, FileName(name), strings.Join(dirs, ", "), ignored)
}

// readTrusted reads path if its owner and mode make it trustworthy: the
// record says which port to grant and which token file to read.
func readTrusted(path string) (Record, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return Record{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	switch {
	case st.Mode&syscall.S_IFMT != syscall.S_IFREG:
		return Record{}, errors.New("not a regular file")
	case st.Uid != 0 && int(st.Uid) != os.Geteuid():
		return Record{}, fmt.Errorf("owned by uid %d, neither root nor you", st.Uid)
	case st.Mode&0o022 != 0:
		return Record{}, fmt.Errorf("writable by others than its owner (mode %04o)", st.Mode&0o7777)
	}
	return Read(path)
}

// Alive reports whether the record's process still runs: its PID exists
// and, when recorded, started at the recorded time.
func (r Record) Alive() bool {
	if r.PID <= 0 {
		return false
	}
	if err := syscall.Kill(r.PID, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if r.Start == 0 {
		return true
	}
	start, err := ProcStart(r.PID)
	return err == nil && start == r.Start
}
