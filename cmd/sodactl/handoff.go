package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// sodactl is built twice (see the Makefile). The lean build (-tags
// soda_lean), installed as /usr/bin/sodactl, links what a sandbox run and
// the read-only views need, and none of go-sdk, go-containerregistry or
// the Prometheus parser: on a machine where each page fault is dear
// (paravirtualised guests), their package initialisation was a third of
// sodactl's start-up, which every `sodactl run` waits for. The full
// build, sodactl-full, serves everything; the lean one hands it the
// commands that need more (image, top, validate, sandbox mcp, run
// --image) by executing it with the same arguments, before doing
// anything else.

// fullName is the full build's file name, next to the lean sodactl (as
// make builds them into bin/) or in DefaultFullPath's directory.
const fullName = "sodactl-full"

// DefaultFullPath is where the packages install the full sodactl.
const DefaultFullPath = "/usr/libexec/soda/" + fullName

// handOff is the error of the lean sodactl for a command that only the
// full one serves; run executes the full sodactl with the same arguments.
type handOff struct {
	what string // the command or flag, for the error if sodactl-full is missing
	run  bool   // a "sodactl run": its own failures exit 125
}

func (h *handOff) Error() string {
	return h.what + " is served by " + fullName
}

// asHandOff returns the hand-off that err (from dispatch) carries, or nil.
func asHandOff(err error) *handOff {
	var h *handOff
	if errors.As(err, &h) {
		return h
	}
	var ran *ranCommand
	if errors.As(err, &ran) && errors.As(ran.err, &h) {
		return h
	}
	return nil
}

// execFunc replaces the process, as syscall.Exec.
type execFunc func(path string, argv, env []string) error

// exec replaces sodactl with the full sodactl at path for the command
// line args; it returns only on failure, with the exit code.
func (h *handOff) exec(path string, err error, args []string, stderr io.Writer, execve execFunc) int {
	code := exitError
	if h.run {
		code = exitSandbox
	}
	if err == nil {
		err = execve(path, append([]string{"sodactl"}, args...), os.Environ())
		err = fmt.Errorf("execute %s: %w", path, err)
	}
	fmt.Fprintf(stderr, "sodactl: %s needs the full sodactl: %v\n", h.what, err)
	return code
}

// findFull returns the full sodactl for the sodactl executable exe ("":
// unknown): sodactl-full next to it, else fallback.
func findFull(exe, fallback string) (string, error) {
	var tried []string
	if exe != "" {
		p := filepath.Join(filepath.Dir(exe), fullName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	tried = append(tried, fallback)
	return "", fmt.Errorf("%s not found (looked for %s): install the soda package, or build it next to sodactl (make)", fullName, strings.Join(tried, " and "))
}

// fullPath is findFull for this process's executable.
func fullPath() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	} else if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return findFull(exe, DefaultFullPath)
}

// execFull is handOff.exec of the full sodactl found by fullPath, with
// the real execve.
func execFull(h *handOff, args []string, stderr io.Writer) int {
	path, err := fullPath()
	return h.exec(path, err, args, stderr, syscall.Exec)
}
