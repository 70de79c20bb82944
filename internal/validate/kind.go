package validate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/soda-project/soda/internal/serverconf"
)

// DefaultDir holds the kinds' configurations, KIND.conf.
const DefaultDir = "/etc/soda/validate"

// FilesArg in ExecStart= stands for the request's files, one argument
// each (workspace-relative names).
const FilesArg = "%FILES%"

// Output formats a validator's output is read in.
const (
	// OutputGCC is "FILE:LINE:COL: SEVERITY: MESSAGE" (shellcheck
	// --format=gcc, gcc, many linters).
	OutputGCC = "gcc"
	// OutputTSC is "FILE(LINE,COL): SEVERITY TSNNNN: MESSAGE" (tsc
	// --pretty false).
	OutputTSC = "tsc"
)

// Kind is one configured validator.
type Kind struct {
	Name string
	// Path is the configuration file, Digest its sha256.
	Path, Digest string
	// Command is the validator's absolute path and fixed arguments, with
	// FilesArg where the files go.
	Command []string
	// EndOfOptions is put right before the files in the validator's argv
	// (DefaultEndOfOptions; "" for a validator that has no such marker):
	// nothing after it is read as an option.
	EndOfOptions string
	// Files are the patterns a file's base name must match (*.sh).
	Files []string
	// Output is the format of the validator's diagnostics.
	Output string
	// ValidExit and InvalidExit map exit statuses to verdicts; any other
	// status is a crash (no verdict).
	ValidExit, InvalidExit []int
	// ReadOnlyPaths are more host directories the validator reads (its
	// installation, when it is not below /usr).
	ReadOnlyPaths []string
	// Env is the validator's extra environment (NAME=VALUE).
	Env []string
	// Image, if set, is the image (REPO@sha256:DIGEST: never a tag) whose
	// root is the system of each call's sandbox: Command[0] is then a
	// path inside it. ImageStore is the store it is taken from (empty:
	// the default, imagestore.DefaultDir). The daemon sets ImageRoot and
	// ImageDigest from the store when it starts.
	Image, ImageStore      string
	ImageRoot, ImageDigest string
	// Listen is the loopback address of soda-validate@KIND.socket
	// ([Listener] Listen=, for soda-generator; "" for stdio only).
	Listen string
	// Limits of each call's sandbox. TmpSize and HomeSize size its
	// private /tmp (and /var/tmp) and home, RAM-backed: with the
	// workspace, all a call can write.
	MemoryMax  int64
	TasksMax   int64
	CPUPercent uint64
	Deadline   time.Duration
	TmpSize    int64
	HomeSize   int64
}

// DefaultEndOfOptions is the end-of-options marker of getopt and most
// validators.
const DefaultEndOfOptions = "--"

// Defaults of a kind's limits (issue 14).
const (
	DefaultMemoryMax  = 1 << 30
	DefaultTasksMax   = 128
	DefaultCPUPercent = 100
	DefaultDeadline   = 120 * time.Second
	// A validator writes little beyond its output: small private /tmp
	// and home (the engine's own default is 1 GiB each).
	DefaultTmpSize  = 64 << 20
	DefaultHomeSize = 64 << 20
	minSize         = 1 << 20 // the engine's least
)

// LoadKind reads DIR/KIND.conf.
func LoadKind(dir, name string) (*Kind, error) {
	if err := serverconf.ValidName(name); err != nil {
		return nil, fmt.Errorf("validator kind %q: %w", name, err)
	}
	p := filepath.Join(dir, name+".conf")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("validator kind %s: %w", name, err)
	}
	return ParseKind(p, name, data)
}

// ParseKind parses a kind's configuration; errors name file, line and key.
func ParseKind(file, name string, data []byte) (*Kind, error) {
	opts, err := serverconf.ParseOptions(file, data)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	k := &Kind{Name: name, Path: file, Digest: hex.EncodeToString(sum[:]), EndOfOptions: DefaultEndOfOptions, Output: OutputGCC, ValidExit: []int{0}, InvalidExit: []int{1},
		MemoryMax: DefaultMemoryMax, TasksMax: DefaultTasksMax, CPUPercent: DefaultCPUPercent, Deadline: DefaultDeadline,
		TmpSize: DefaultTmpSize, HomeSize: DefaultHomeSize}
	for _, o := range opts {
		fail := func(err error) error { return &serverconf.Error{File: file, Line: o.Line, Key: o.Key(), Err: err} }
		if err := k.apply(o); err != nil {
			return nil, fail(err)
		}
	}
	switch {
	case len(k.Command) == 0:
		return nil, &serverconf.Error{File: file, Key: "Validator.ExecStart", Err: errors.New("no validator to run")}
	case !slices.Contains(k.Command, FilesArg):
		return nil, &serverconf.Error{File: file, Key: "Validator.ExecStart", Err: fmt.Errorf("no %s argument: the files would not be passed", FilesArg)}
	case len(k.Files) == 0:
		return nil, &serverconf.Error{File: file, Key: "Validator.Files", Err: errors.New("no file pattern: every file would be refused")}
	case k.EndOfOptions != "" && k.Command[len(k.Command)-1] != FilesArg:
		return nil, &serverconf.Error{File: file, Key: "Validator.ExecStart", Err: fmt.Errorf("an argument after %s would follow the end of options (%s) and be read as a file: put it before %s, or set EndOfOptions= empty", FilesArg, k.EndOfOptions, FilesArg)}
	}
	return k, nil
}

func (k *Kind) apply(o serverconf.Option) error {
	v := o.Value
	switch o.Key() {
	case "Validator.ExecStart":
		argv, err := serverconf.SplitCommand(v)
		if err != nil {
			return err
		}
		if len(argv) == 0 || !filepath.IsAbs(argv[0]) || filepath.Clean(argv[0]) != argv[0] {
			return errors.New("the validator must be an absolute, clean path")
		}
		for _, a := range argv[1:] {
			if strings.Contains(a, FilesArg) && a != FilesArg {
				return fmt.Errorf("%s must be an argument of its own, not part of %q", FilesArg, a)
			}
		}
		k.Command = argv
	case "Validator.Image":
		repo, digest, ok := strings.Cut(v, "@")
		if !ok || repo == "" || !strings.HasPrefix(digest, "sha256:") || len(digest) != len("sha256:")+64 ||
			strings.Trim(digest[len("sha256:"):], "0123456789abcdef") != "" {
			return fmt.Errorf("%q: a validator names its image by digest, REPO@sha256:HEX (a tag could change under the verdicts; sodactl image pull prints the digest)", v)
		}
		k.Image = v
	case "Validator.ImageStore":
		if !filepath.IsAbs(v) || filepath.Clean(v) != v {
			return errors.New("the image store must be an absolute, clean path")
		}
		k.ImageStore = v
	case "Validator.EndOfOptions":
		if v != "" && (!strings.HasPrefix(v, "-") || strings.ContainsAny(v, " \t")) {
			return fmt.Errorf("%q: one argument that begins with - (such as --), or empty for none", v)
		}
		k.EndOfOptions = v
	case "Validator.Files":
		for _, p := range strings.Fields(v) {
			if _, err := path.Match(p, "x"); err != nil || strings.Contains(p, "/") {
				return fmt.Errorf("pattern %q: a base-name glob such as *.sh", p)
			}
			k.Files = append(k.Files, p)
		}
	case "Validator.Output":
		if v != OutputGCC && v != OutputTSC {
			return fmt.Errorf("%q: gcc or tsc", v)
		}
		k.Output = v
	case "Validator.ValidExit", "Validator.InvalidExit":
		var codes []int
		for _, f := range strings.Fields(v) {
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 || n > 255 {
				return fmt.Errorf("%q: exit statuses 0 to 255", f)
			}
			codes = append(codes, n)
		}
		if o.Name == "ValidExit" {
			k.ValidExit = codes
		} else {
			k.InvalidExit = codes
		}
	case "Validator.ReadOnlyPaths":
		for _, p := range strings.Fields(v) {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				return fmt.Errorf("%q: an absolute, clean path", p)
			}
			k.ReadOnlyPaths = append(k.ReadOnlyPaths, p)
		}
	case "Validator.Environment":
		for _, e := range strings.Fields(v) {
			if i := strings.IndexByte(e, '='); i <= 0 {
				return fmt.Errorf("%q: NAME=VALUE", e)
			}
			k.Env = append(k.Env, e)
		}
	case "Listener.Listen":
		if err := serverconf.CheckLoopback(v); err != nil {
			return err
		}
		k.Listen = v
	case "Limits.MemoryMax":
		n, err := serverconf.ParseBytes(v)
		if err != nil {
			return err
		}
		k.MemoryMax = n
	case "Limits.TasksMax":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: a positive count", v)
		}
		k.TasksMax = n
	case "Limits.CPUQuota":
		n, err := strconv.ParseUint(strings.TrimSuffix(v, "%"), 10, 64)
		if err != nil || n < 1 || !strings.HasSuffix(v, "%") {
			return fmt.Errorf("%q: a percentage such as 100%%", v)
		}
		k.CPUPercent = n
	case "Limits.TmpSize", "Limits.HomeSize":
		n, err := serverconf.ParseBytes(v)
		if err != nil {
			return err
		}
		if n < minSize {
			return fmt.Errorf("%q: at least 1M", v)
		}
		if o.Name == "TmpSize" {
			k.TmpSize = n
		} else {
			k.HomeSize = n
		}
	case "Limits.Deadline":
		d, err := serverconf.ParseTimespan(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q: a positive time span such as 120s", v)
		}
		k.Deadline = d
	default:
		return errors.New("unknown key (known: Validator.ExecStart, EndOfOptions, Files, Output, ValidExit, InvalidExit, ReadOnlyPaths, Environment, Image, ImageStore; Listener.Listen; Limits.MemoryMax, TasksMax, CPUQuota, Deadline, TmpSize, HomeSize)")
	}
	return nil
}

// argv is the validator's command line for the files names: Command with
// FilesArg replaced by EndOfOptions (when set) and the names.
func (k *Kind) argv(names []string) []string {
	var argv []string
	for _, a := range k.Command {
		if a != FilesArg {
			argv = append(argv, a)
			continue
		}
		if k.EndOfOptions != "" {
			argv = append(argv, k.EndOfOptions)
		}
		argv = append(argv, names...)
	}
	return argv
}
