package validate

import (
	"strings"
	"testing"
)

func TestParseKind(t *testing.T) {
	tests := []struct {
		name, conf, want string // want "" ok
	}{
		{"ok", "[Validator]\nExecStart=/usr/bin/shellcheck --format=gcc %FILES%\nFiles=*.sh\n[Limits]\nMemoryMax=512M\nDeadline=30s\n", ""},
		{"no command", "[Validator]\nFiles=*.sh\n", "no validator"},
		{"relative", "[Validator]\nExecStart=shellcheck %FILES%\nFiles=*.sh\n", "absolute"},
		{"no files arg", "[Validator]\nExecStart=/usr/bin/shellcheck\nFiles=*.sh\n", "%FILES%"},
		{"files arg glued", "[Validator]\nExecStart=/usr/bin/x --in=%FILES%\nFiles=*.sh\n", "argument of its own"},
		{"no patterns", "[Validator]\nExecStart=/usr/bin/x %FILES%\n", "no file pattern"},
		{"pattern with slash", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=src/*.sh\n", "base-name glob"},
		{"bad output", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\nOutput=json\n", "gcc or tsc"},
		{"bad exit", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\nValidExit=300\n", "0 to 255"},
		{"bad limit", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\n[Limits]\nTasksMax=-1\n", "positive"},
		{"bad cpu", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\n[Limits]\nCPUQuota=100\n", "percentage"},
		{"public listener", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\n[Listener]\nListen=0.0.0.0:1\n", "loopback"},
		{"unknown key", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\nPlugin=evil\n", "unknown key"},
		{"end of options with an argument after the files", "[Validator]\nExecStart=/usr/bin/x %FILES% --late\nFiles=*.sh\n", "after " + FilesArg},
		{"end of options that is no option", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\nEndOfOptions=end\n", "begins with -"},
		{"no end of options, an argument after the files", "[Validator]\nExecStart=/usr/bin/x %FILES% --late\nFiles=*.sh\nEndOfOptions=\n[Limits]\nMemoryMax=512M\n", ""},
	}
	for _, tc := range tests {
		k, err := ParseKind("/etc/soda/validate/k.conf", "k", []byte(tc.conf))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), "k.conf"):
			t.Errorf("%s: error %q does not name the file", tc.name, err)
		case tc.want == "" && (k.MemoryMax != 512<<20 || k.TasksMax != DefaultTasksMax || k.Digest == ""):
			t.Errorf("%s: %+v", tc.name, k)
		}
	}
}

func TestCheckFiles(t *testing.T) {
	k := &Kind{Name: "sh", Files: []string{"*.sh"}}
	ok := []File{{Path: "a.sh", Content: "echo"}, {Path: "lib/b.sh", Content: ""}}
	if err := CheckFiles(k, ok); err != nil {
		t.Errorf("good files: %v", err)
	}
	for name, files := range map[string][]File{
		"invalid UTF-8": {{Path: "a.sh", Content: "\xff"}},
		"overlap":       {{Path: "Lib", Content: ""}, {Path: "lib/b.sh", Content: ""}},
		"dotdot":        {{Path: "a/../b.sh"}},
		"pattern":       {{Path: "a.py"}},
		// Options, not names: each would reach the validator's argv.
		"an option as a name":       {{Path: "--enable=all,x.sh"}},
		"a short option":            {{Path: "-x/a.sh"}},
		"a dash in a later segment": {{Path: "src/-x.sh"}},
		"a lone dash":               {{Path: "-"}},
	} {
		if err := CheckFiles(k, files); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseDiagnostics(t *testing.T) {
	ds, cut := parseDiagnostics(OutputGCC, "a.sh:2:6: note: Double quote [SC2086]\nsomething else\n")
	if cut || len(ds) != 2 || ds[0].File != "a.sh" || ds[0].Line != 2 || ds[0].Column != 6 || ds[0].Severity != "note" || ds[1].Message != "something else" {
		t.Errorf("gcc: %+v", ds)
	}
	ds, _ = parseDiagnostics(OutputTSC, "src/a.ts(1,14): error TS2322: Type 'string' is not assignable to type 'number'.\n")
	if len(ds) != 1 || ds[0].File != "src/a.ts" || ds[0].Line != 1 || ds[0].Column != 14 || !strings.HasPrefix(ds[0].Message, "TS2322") {
		t.Errorf("tsc: %+v", ds)
	}
	if _, cut := parseDiagnostics(OutputGCC, strings.Repeat("x.sh:1:1: error: long message here\n", 2000)); !cut {
		t.Errorf("diagnostics over 16 KiB are not marked truncated")
	}
}

func TestDigestsAndStatement(t *testing.T) {
	files := []File{{Path: "b.sh", Content: "2"}, {Path: "a.sh", Content: "1"}}
	each, all := digests(files)
	if len(each) != 2 || all == "" {
		t.Fatal(each, all)
	}
	// The order of the request does not change the digest of all.
	_, all2 := digests([]File{files[1], files[0]})
	if all != all2 {
		t.Errorf("digest of all depends on the request's order")
	}
	valid := StatusValid
	k := &Kind{Name: "sh", Path: "/etc/soda/validate/sh.conf", Command: []string{"/usr/bin/shellcheck"}}
	v := &Verdict{Completed: true, Verdict: &valid, Digests: Digests{Sources: each, All: all, Config: "c", Validator: "v"}}
	st := statement(v, k)
	if st.Predicate.Result != "pass" || len(st.Subject) != 2 || st.Subject[0].Name != "a.sh" || len(st.Predicate.PassedTests) != 1 {
		t.Errorf("statement of a valid verdict: %+v", st)
	}
	v.Completed, v.Verdict = false, nil
	if st := statement(v, k); st.Predicate.Result != "fail" || len(st.Predicate.FailedTests) != 1 {
		t.Errorf("statement of no verdict: %+v", st)
	}
}

// TestArgv: the files come after the kind's end-of-options marker, so
// that no name can be read as an option even if one starting with "-"
// got past CheckFiles; an empty marker leaves it out.
func TestArgv(t *testing.T) {
	for _, tc := range []struct {
		name, eoo string
		command   []string
		want      string
	}{
		{"default marker", "--", []string{"/usr/bin/shellcheck", "--format=gcc", FilesArg}, "/usr/bin/shellcheck --format=gcc -- a.sh -b.sh"},
		{"no marker", "", []string{"/usr/bin/node", "tsc", "--noEmit", FilesArg}, "/usr/bin/node tsc --noEmit a.sh -b.sh"},
		{"own marker", "--end-of-options", []string{"/usr/bin/x", FilesArg}, "/usr/bin/x --end-of-options a.sh -b.sh"},
		{"no marker, argument after", "", []string{"/usr/bin/x", FilesArg, "--late"}, "/usr/bin/x a.sh -b.sh --late"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &Kind{Command: tc.command, EndOfOptions: tc.eoo}
			if got := strings.Join(k.argv([]string{"a.sh", "-b.sh"}), " "); got != tc.want {
				t.Errorf("argv %q, want %q", got, tc.want)
			}
		})
	}
	k, err := ParseKind("/etc/soda/validate/k.conf", "k", []byte("[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\n"))
	if err != nil || k.EndOfOptions != "--" {
		t.Errorf("default EndOfOptions: %+v %v, want --", k, err)
	}
}
