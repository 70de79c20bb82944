package sandbox

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// DefaultInitPath is where the soda package installs the sandbox's init,
// soda-sandbox-init (cmd/soda-sandbox-init).
const DefaultInitPath = "/usr/libexec/soda/" + wire.InitArg0

// FindInit returns the init binary for Config.InitPath: soda-sandbox-init
// next to the running executable (symlinks resolved: a build tree's bin/),
// else DefaultInitPath. One that exists but cannot serve (checkInitPath)
// is an error, not skipped.
func FindInit() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
	}
	return findInit(exe, DefaultInitPath)
}

// findInit is FindInit for the executable exe ("": unknown) and the
// installed init fallback.
func findInit(exe, fallback string) (string, error) {
	var tried []string
	if exe != "" {
		p := filepath.Join(filepath.Dir(exe), wire.InitArg0)
		if _, err := os.Lstat(p); err == nil {
			return p, checkInitPath(p)
		}
		tried = append(tried, p)
	}
	if _, err := os.Lstat(fallback); err == nil {
		return fallback, checkInitPath(fallback)
	}
	tried = append(tried, fallback)
	return "", fmt.Errorf("sandbox init %s not found (looked for %s): install the soda package, or build it next to this program (make, or go build -o DIR/ ./cmd/soda-sandbox-init)", wire.InitArg0, strings.Join(tried, " and "))
}

// checkInitPath checks Config.InitPath: an absolute path to a regular file
// the caller may execute, which nobody but its owner and group can
// replace (it runs as each sandbox's PID 1 with the caller's privileges
// until it has confined itself).
func checkInitPath(p string) error {
	if p == "" {
		return errors.New("sandbox: Config.InitPath is empty: set it to the soda-sandbox-init binary (sandbox.FindInit finds the installed one)")
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("sandbox: Config.InitPath %q is not an absolute path", p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("sandbox: Config.InitPath: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("sandbox: Config.InitPath %s is not a regular file", p)
	case fi.Mode().Perm()&0o002 != 0:
		return fmt.Errorf("sandbox: Config.InitPath %s is writable by everyone (mode %v): refusing to run it as the sandbox's init", p, fi.Mode().Perm())
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return fmt.Errorf("sandbox: Config.InitPath %s is not executable: %w", p, err)
	}
	return nil
}

// elfInterp returns the ELF interpreter (PT_INTERP) the binary at p asks
// for, "" for a static binary (or one that is not ELF, which exec then
// refuses on its own).
func elfInterp(p string) (string, error) {
	raw, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	var magic [4]byte
	if _, err := raw.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return "", nil
	}
	f, err := elf.NewFile(raw)
	if err != nil {
		return "", err
	}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, min(prog.Filesz, 4096))
		if _, err := prog.ReadAt(b, 0); err != nil {
			return "", fmt.Errorf("%s: PT_INTERP: %w", p, err)
		}
		return strings.TrimRight(string(b), "\x00"), nil
	}
	return "", nil
}

// guarded says whether init starts the repository guard for spec, which
// it does by re-executing itself inside the sandbox: for a read-write
// grant that Unprotect does not name.
func guarded(spec Spec) bool {
	return slices.ContainsFunc(spec.ReadWrite, func(g string) bool { return !insideAny(g, spec.Unprotect) })
}

// imageInitError says why init cannot run on an image's root when it
// re-executes itself there (the repository guard, see guarded): after the
// root is the image's, the interpreter interp of a dynamically linked
// init (elfInterp, "" for a static one) and its libraries are not there.
func imageInitError(initPath, interp string) error {
	if interp == "" {
		return nil
	}
	return fmt.Errorf("sandbox: %s is dynamically linked (its ELF interpreter is %s), so it cannot re-execute itself on an image's root, which lacks the host's libraries: build it statically (CGO_ENABLED=0, as soda's Makefile and packages do)", initPath, interp)
}
