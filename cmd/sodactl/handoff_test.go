package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFindFull(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	lib := filepath.Join(dir, "libexec")
	for _, d := range []string{bin, lib} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(p string) {
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fallback := filepath.Join(lib, fullName)
	lone := filepath.Join(dir, "lone")
	if err := os.Mkdir(lone, 0o755); err != nil {
		t.Fatal(err)
	}
	touch(filepath.Join(bin, fullName))
	touch(fallback)
	tests := []struct {
		name, exe, fallback, want, err string
	}{
		{"next to sodactl first", filepath.Join(bin, "sodactl"), fallback, filepath.Join(bin, fullName), ""},
		{"installed", filepath.Join(lone, "sodactl"), fallback, fallback, ""},
		{"executable unknown", "", fallback, fallback, ""},
		{"missing", filepath.Join(lone, "sodactl"), filepath.Join(lone, "nope"), "", "sodactl-full not found (looked for " + filepath.Join(lone, fullName) + " and " + filepath.Join(lone, "nope") + "): install the soda package"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := findFull(tt.exe, tt.fallback)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("findFull = %q, %v; want an error with %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("findFull = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestHandOffExec(t *testing.T) {
	args := []string{"image", "list", "--json"}
	tests := []struct {
		name     string
		h        handOff
		findErr  error
		execErr  error
		wantCode int
		wantExec bool
		wantMsg  string
	}{
		{"exec fails", handOff{what: "sodactl image"}, nil, errors.New("permission denied"), exitError, true,
			"sodactl: sodactl image needs the full sodactl: execute /x/sodactl-full: permission denied\n"},
		{"run exec fails", handOff{what: "sodactl run --image", run: true}, nil, errors.New("no such file"), exitSandbox, true,
			"sodactl: sodactl run --image needs the full sodactl: execute /x/sodactl-full: no such file\n"},
		{"not found", handOff{what: "sodactl top"}, errors.New("sodactl-full not found"), nil, exitError, false,
			"sodactl: sodactl top needs the full sodactl: sodactl-full not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotPath string
			var gotArgv []string
			execve := func(path string, argv, env []string) error {
				gotPath, gotArgv = path, argv
				return tt.execErr
			}
			var stderr bytes.Buffer
			code := tt.h.exec("/x/sodactl-full", tt.findErr, args, &stderr, execve)
			if code != tt.wantCode || stderr.String() != tt.wantMsg {
				t.Fatalf("exec = %d, stderr %q; want %d, %q", code, stderr.String(), tt.wantCode, tt.wantMsg)
			}
			if !tt.wantExec {
				if gotPath != "" {
					t.Fatalf("executed %s without a full sodactl", gotPath)
				}
				return
			}
			if want := append([]string{"sodactl"}, args...); gotPath != "/x/sodactl-full" || !slices.Equal(gotArgv, want) {
				t.Fatalf("executed %s %q; want /x/sodactl-full %q", gotPath, gotArgv, want)
			}
		})
	}
}

func TestAsHandOff(t *testing.T) {
	h := &handOff{what: "sodactl run --image", run: true}
	tests := []struct {
		name string
		err  error
		want *handOff
	}{
		{"none", nil, nil},
		{"other error", errors.New("x"), nil},
		{"direct", h, h},
		{"from run", &ranCommand{code: exitSandbox, err: h}, h},
		{"run's other error", &ranCommand{code: exitSandbox, err: errors.New("x")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := asHandOff(tt.err); got != tt.want {
				t.Fatalf("asHandOff(%v) = %v; want %v", tt.err, got, tt.want)
			}
		})
	}
}
