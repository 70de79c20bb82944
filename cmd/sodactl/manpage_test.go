//go:build !soda_lean

package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/soda-project/soda/internal/doccheck"
)

// TestManPageFlags: the options of sodactl and of each of its commands are
// the ones its --help names and the ones sodactl(1) documents for it, and
// every option the page's option lists define is accepted.
func TestManPageFlags(t *testing.T) {
	b, err := os.ReadFile("../../man/sodactl.1.md")
	if err != nil {
		t.Fatal(err)
	}
	man := string(b)
	optionsPage := doccheck.Section(man, "# OPTIONS")
	runPage := doccheck.Section(man, "# RUN OPTIONS")
	sessionPage := doccheck.Section(man, "*SESSION OPTIONS*")
	command := func(name string, fs *flag.FlagSet, help string, page ...string) doccheck.Command {
		opts, hidden := doccheck.Flags(fs)
		return doccheck.Command{Name: name, Options: opts, Hidden: hidden, Help: help, Page: strings.Join(page, "\n")}
	}
	var (
		opts     options
		version  bool
		client   string
		ro       runOptions
		so       sandboxOptions
		sessions sessionOptions
		to       topOptions
		io       imageOptions
	)
	root := command("sodactl", rootFlags(&opts, &version), rootUsage, optionsPage)
	mcp := command("sodactl mcp", clientConfigFlags(&opts, &client), mcpUsage, optionsPage)
	run := command("sodactl run", ro.flagSet(&opts), runUsage, runPage, optionsPage)
	sandbox := command("sodactl sandbox", so.flagSet(), sandboxUsage, doccheck.Section(man, "# COMMANDS"))
	sandboxMCP := command("sodactl sandbox mcp", sessions.flagSet(), sandboxMCPUsage, sessionPage)
	top := command("sodactl top", to.flagSet(&opts), topUsage, doccheck.Section(man, "# TOP"), optionsPage)
	vfs := newFlagSet("sodactl validate client-config")
	(&validateOptions{}).bind(vfs)
	vfs.StringVar(&client, "client", "", "")
	validate := command("sodactl validate", vfs, validateUsage, doccheck.Section(man, "## VALIDATE OPTIONS"), optionsPage)
	imagePage := doccheck.Section(man, "# IMAGES")
	image := command("sodactl image", io.flagSet(), imageUsage, imagePage)
	for _, c := range []doccheck.Command{root, mcp, run, sandbox, sandboxMCP, top, validate, image} {
		t.Run(c.Name, func(t *testing.T) { c.Check(t) })
	}
	t.Run("OPTIONS", func(t *testing.T) { doccheck.CheckDefined(t, optionsPage, root, mcp, run, top, validate) })
	t.Run("IMAGES", func(t *testing.T) { doccheck.CheckDefined(t, imagePage, image) })
	t.Run("RUN OPTIONS", func(t *testing.T) { doccheck.CheckDefined(t, runPage, run) })
	t.Run("SESSION OPTIONS", func(t *testing.T) { doccheck.CheckDefined(t, sessionPage, sandboxMCP) })
}

// TestManPageCommands: sodactl(1) documents every command of sodactl.
func TestManPageCommands(t *testing.T) {
	man, err := os.ReadFile("../../man/sodactl.1.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"run", "sandbox list", "sandbox status", "sandbox kill", "sandbox grant", "sandbox revoke",
		"sandbox audit", "sandbox profiles", "sandbox mcp", "top", "mcp list", "mcp status", "mcp token", "mcp client-config",
		"validate token", "validate client-config",
		"image pull", "image import", "image list", "image inspect", "image rm", "image prune"} {
		if !bytes.Contains(man, []byte("**"+cmd+"**")) && !bytes.Contains(man, []byte("**sodactl "+cmd+"**")) {
			t.Errorf("sodactl(1) lacks **%s**", cmd)
		}
	}
}

// TestSandboxMCPLimitNames: sodactl sandbox mcp names its limits as
// sodactl run does, and still takes their first names, hidden.
func TestSandboxMCPLimitNames(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		memory      string
		tasks       int64
		wantErrText string
	}{
		{"run's names", []string{"--memory", "64M", "--tasks", "40"}, "64M", 40, ""},
		{"first names", []string{"--memory-max", "64M", "--tasks-max", "40"}, "64M", 40, ""},
		{"last one wins", []string{"--memory-max", "1G", "--memory", "64M"}, "64M", 0, ""},
		{"no such name", []string{"--tasks-maximum", "40"}, "", 0, "tasks-maximum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var so sessionOptions
			_, err := parseInterspersed(so.flagSet(), tt.args, sandboxMCPUsage, "sodactl sandbox mcp")
			if tt.wantErrText != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrText) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErrText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if so.memory != tt.memory || so.tasks != tt.tasks {
				t.Errorf("memory %q, tasks %d; want %q, %d", so.memory, so.tasks, tt.memory, tt.tasks)
			}
		})
	}
}
