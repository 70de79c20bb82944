package main

// Rows 13, 14 and 24: the filesystem. Links out of the workspace, files
// planted where the host will find them, programs run from noexec /tmp,
// writes into the read-only system.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// scratch returns a private directory inside the workspace, created on
// first use and removed when the battery ends.
func (b *battery) scratch() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := filepath.Join(b.cfg.workspace, fmt.Sprintf(".sbxprobe-%d", os.Getpid()))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	b.cleanups = append(b.cleanups, func() { os.RemoveAll(dir) })
	return dir, nil
}

// readThrough reads what p leads to: up to 512 bytes of a file, or the
// entries of a directory. It returns a description and how much was read.
func readThrough(p string) (string, int, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", 0, err
	}
	if st.IsDir() {
		ents, err := os.ReadDir(p)
		if err != nil {
			return "", 0, err
		}
		return fmt.Sprintf("directory with %d entries", len(ents)), len(ents), nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	n, err := io.ReadFull(f, make([]byte, 512))
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", n, err
	}
	return fmt.Sprintf("read %d bytes", n), n, nil
}

// sameFile reports whether a and b are the same inode.
func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// workspaceProbes is row 13: symlinks and hard links out of the workspace.
func (b *battery) workspaceProbes() []probe {
	if b.cfg.workspace == "" {
		return []probe{{row: 13, name: "workspace", skip: "no --workspace given"}}
	}
	type link struct {
		name, target string
		info         bool
	}
	links := []link{
		{"symlink /etc/shadow", "/etc/shadow", false},
		{"symlink /root", "/root", false},
		{"symlink /proc/1/root", "/proc/1/root", false},
		{"symlink host-home", b.cfg.hostHome, false},
		{"symlink /dev/tty", "/dev/tty", true},
		{"symlink /proc/self/fd", "/proc/self/fd", true},
	}
	var ps []probe
	for _, l := range links {
		p := probe{row: 13, name: l.name, info: l.info}
		if l.target == "" {
			p.skip = "no --host-home given"
		} else {
			p.run = func() Result { return b.symlinkEscape(l.name, l.target) }
		}
		ps = append(ps, p)
	}
	ps = append(ps,
		probe{row: 13, name: "hardlink /etc/passwd", run: func() Result {
			dir, err := b.scratch()
			if err != nil {
				return Result{Errno: errnoName(err), Detail: "cannot use the workspace: " + err.Error()}
			}
			dst := filepath.Join(dir, "x")
			err = os.Link("/etc/passwd", dst)
			if err == nil {
				os.Remove(dst)
			}
			return attempt("link /etc/passwd -> "+dst, err)
		}},
		probe{row: 13, name: "rename workspace->/tmp", run: func() Result {
			return b.crossMount("rename", os.Rename)
		}},
		probe{row: 13, name: "link workspace->/tmp", run: func() Result {
			return b.crossMount("link", os.Link)
		}},
	)
	return ps
}

// symlinkEscape plants a symlink to target in the workspace and reads
// through it: blocked iff nothing can be read. For /proc/1/root, reaching
// our own root is no escape.
func (b *battery) symlinkEscape(name, target string) Result {
	dir, err := b.scratch()
	if err != nil {
		return Result{Errno: errnoName(err), Detail: "cannot use the workspace: " + err.Error()}
	}
	l := filepath.Join(dir, "link-"+strings.ReplaceAll(strings.TrimPrefix(name, "symlink "), "/", "_"))
	if err := os.Symlink(target, l); err != nil {
		return attempt("symlink "+l+" -> "+target, err)
	}
	desc, n, err := readThrough(l)
	if err != nil {
		return attempt("read through "+l+" -> "+target, err)
	}
	if n == 0 {
		return Result{Blocked: true, Detail: fmt.Sprintf("through %s -> %s: %s (nothing to read)", l, target, desc)}
	}
	if target == "/proc/1/root" && sameFile(l, "/") {
		return Result{Blocked: true, Detail: fmt.Sprintf("through %s -> %s: %s, but it is our own root", l, target, desc)}
	}
	return Result{Detail: fmt.Sprintf("through %s -> %s: %s", l, target, desc)}
}

// crossMount moves (or links) a workspace file to /tmp with op: blocked iff
// op fails; a moved file is removed.
func (b *battery) crossMount(opName string, op func(string, string) error) Result {
	dir, err := b.scratch()
	if err != nil {
		return Result{Errno: errnoName(err), Detail: "cannot use the workspace: " + err.Error()}
	}
	src := filepath.Join(dir, opName+"-src")
	if err := os.WriteFile(src, []byte("x"), 0o600); err != nil {
		return Result{Errno: errnoName(err), Detail: "cannot write to the workspace: " + err.Error()}
	}
	dst := fmt.Sprintf("/tmp/sbxprobe-%s-%d", opName, os.Getpid())
	err = op(src, dst)
	if err == nil {
		os.Remove(dst)
	}
	return attempt(fmt.Sprintf("%s %s -> %s", opName, src, dst), err)
}

// copyFile copies src to dst with mode perm.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// execCopy copies /bin/true to dst, runs it and removes it: blocked iff it
// does not run. ETXTBSY (a racing fork still holding the write descriptor)
// is retried.
func execCopy(dst string, timeout time.Duration) Result {
	if err := copyFile("/bin/true", dst, 0o755); err != nil {
		return Result{Blocked: true, Errno: errnoName(err), Detail: "copy /bin/true to " + dst + ": " + err.Error()}
	}
	defer os.Remove(dst)
	var err error
	for range 5 {
		if _, err = runTimeout(timeout, dst); !errors.Is(err, syscall.ETXTBSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := attempt("exec "+dst, err)
	if r.Blocked && isNoexec(filepath.Dir(dst)) {
		r.Detail += " (" + filepath.Dir(dst) + " is mounted noexec)"
	}
	return r
}

// writeExecProbes is row 14: planted files and programs run from /tmp and
// from the workspace.
func (b *battery) writeExecProbes() []probe {
	ps := []probe{{row: 14, name: "exec-tmp", run: func() Result {
		return execCopy(fmt.Sprintf("/tmp/sbxprobe-true-%d", os.Getpid()), b.inner())
	}}}
	ws := probe{row: 14, name: "exec-workspace", info: true}
	if b.cfg.workspace == "" {
		ws.skip = "no --workspace given"
	} else {
		ws.run = func() Result {
			dir, err := b.scratch()
			if err != nil {
				return Result{Errno: errnoName(err), Detail: "cannot use the workspace: " + err.Error()}
			}
			return execCopy(filepath.Join(dir, "true"), b.inner())
		}
	}
	ps = append(ps, ws)
	if len(b.cfg.plant) == 0 {
		return append(ps, probe{row: 14, name: "plant", skip: "no --plant given"})
	}
	for _, p := range b.cfg.plant {
		ps = append(ps, probe{row: 14, name: "plant " + p, run: func() Result { return plant(p) }})
	}
	return ps
}

// plant creates p with content "planted" and leaves it for the harness:
// blocked iff creation fails. Success on a tmpfs under /tmp or /dev/shm,
// or /var/tmp, which are private inside the sandbox, is informational.
func plant(p string) Result {
	err := os.WriteFile(p, []byte("planted"), 0o644)
	if err != nil {
		return attempt("create "+p, err)
	}
	if (pathUnder(p, "/tmp") || pathUnder(p, "/var/tmp") || pathUnder(p, "/dev/shm")) && isTmpfs(filepath.Dir(p)) {
		return Result{Info: true, Detail: "created " + p + " in the private tmpfs (the harness checks the host side)"}
	}
	return Result{Detail: "created " + p}
}

// isTmpfs reports whether dir is on a tmpfs.
func isTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

// writeSystemProbes is row 24: the system is read-only. A file that did not
// exist is removed again; an existing one is only opened for writing.
func (b *battery) writeSystemProbes() []probe {
	var ps []probe
	for _, p := range []string{"/usr/soda-planted", "/etc/soda-planted", "/var/lib/soda-planted"} {
		ps = append(ps, probe{row: 24, name: "write-system " + p, run: func() Result {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if errors.Is(err, fs.ErrExist) {
				f, err = os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return attempt("open existing "+p+" for writing", err)
				}
				f.Close()
				return Result{Detail: "opened existing " + p + " for writing (left unchanged)"}
			}
			if err != nil {
				return attempt("create "+p, err)
			}
			f.Close()
			os.Remove(p)
			return Result{Detail: "created " + p + " (removed again)"}
		}})
	}
	return ps
}

// isNoexec reports whether dir is on a noexec mount.
func isNoexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}
