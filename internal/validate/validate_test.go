package validate

import (
	"path/filepath"
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
		{"small tmp", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\n[Limits]\nTmpSize=512K\n", "at least 1M"},
		{"bad home", "[Validator]\nExecStart=/usr/bin/x %FILES%\nFiles=*.sh\n[Limits]\nHomeSize=lots\n", "HomeSize"},
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
		case tc.want == "" && (k.MemoryMax != 512<<20 || k.TasksMax != DefaultTasksMax || k.Digest == "" || k.TmpSize != 64<<20 || k.HomeSize != 64<<20):
			t.Errorf("%s: %+v", tc.name, k)
		}
	}
}

func TestCheckFiles(t *testing.T) {
	k := &Kind{Name: "sh", Files: []string{"*.sh"}}
	ok := []File{{Path: "a.sh", Content: "echo"}, {Path: "lib/b.sh", Content: ""}, {Path: "é/ß.sh", Content: "\u202e in text is text"}}
	if err := CheckFiles(k, ok); err != nil {
		t.Errorf("good files: %v", err)
	}
	for _, tc := range []struct {
		name  string
		files []File
		want  string // in the refusal
	}{
		{"invalid UTF-8", []File{{Path: "a.sh", Content: "\xff"}}, "not UTF-8"},
		{"overlap", []File{{Path: "Lib.sh", Content: ""}, {Path: "lib.sh/b.sh", Content: ""}}, "overlap"},
		{"dotdot", []File{{Path: "a/../b.sh"}}, ".."},
		{"pattern", []File{{Path: "a.py"}}, "takes only"},
		// Options, not names: each would reach the validator's argv.
		{"an option as a name", []File{{Path: "--enable=all,x.sh"}}, `begins with "-"`},
		{"a short option", []File{{Path: "-x/a.sh"}}, `begins with "-"`},
		{"a dash in a later segment", []File{{Path: "src/-x.sh"}}, `begins with "-"`},
		{"a lone dash", []File{{Path: "-"}}, `begins with "-"`},
		// Characters that hide what a name says.
		{"a C1 control (NEL)", []File{{Path: "a\u0085.sh"}}, "U+0085"},
		{"a C1 control (CSI)", []File{{Path: "a\u009b.sh"}}, "U+009B"},
		{"the first C1 control", []File{{Path: "a\u0080.sh"}}, "U+0080"},
		{"the last C1 control", []File{{Path: "a\u009f.sh"}}, "U+009F"},
		{"a bidi embedding (LRE)", []File{{Path: "a\u202a.sh"}}, "U+202A"},
		{"a bidi override (RLO)", []File{{Path: "a\u202egs.sh"}}, "U+202E"},
		{"a bidi isolate (LRI)", []File{{Path: "a\u2066.sh"}}, "U+2066"},
		{"a bidi isolate end (PDI)", []File{{Path: "a\u2069.sh"}}, "U+2069"},
		{"a left-to-right mark", []File{{Path: "a\u200e.sh"}}, "U+200E"},
		{"a right-to-left mark", []File{{Path: "a\u200f.sh"}}, "U+200F"},
		{"an Arabic letter mark", []File{{Path: "a\u061c.sh"}}, "U+061C"},
		// Names that fold to one: Unicode case folding, not ToLower.
		{"long s and s", []File{{Path: "\u017f.sh"}, {Path: "s.sh"}}, "overlap"},
		{"long s and S", []File{{Path: "S.sh"}, {Path: "\u017f.sh"}}, "overlap"},
		{"Kelvin sign and k", []File{{Path: "\u212a.sh"}, {Path: "k.sh"}}, "overlap"},
		{"Kelvin sign and K", []File{{Path: "\u212a.sh"}, {Path: "K.sh"}}, "overlap"},
		{"long s in a directory", []File{{Path: "\u017frc/a.sh"}, {Path: "SRC/a.sh"}}, "overlap"},
		{"long s, a directory and a file", []File{{Path: "\u017frc.sh/a.sh"}, {Path: "src.sh"}}, "overlap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFiles(k, tc.files)
			if err == nil || !IsRefusal(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckFiles(%q) = %v, want a refusal saying %q", tc.files, err, tc.want)
			}
		})
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

// TestPackagedExamples: the kinds the package ships parse, with the
// end-of-options each validator accepts (tsc refuses --).
func TestPackagedExamples(t *testing.T) {
	for name, eoo := range map[string]string{"shellcheck": "--", "tsc": ""} {
		k, err := LoadKind(filepath.Join("..", "..", "packaging", "validate"), name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if k.EndOfOptions != eoo || k.TmpSize != DefaultTmpSize || k.HomeSize != DefaultHomeSize {
			t.Errorf("%s: EndOfOptions %q (want %q), TmpSize %d, HomeSize %d", name, k.EndOfOptions, eoo, k.TmpSize, k.HomeSize)
		}
	}
}
