package serverconf

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

const fullConf = `# A complete configuration: every section and every key.
[Server]
ExecStart=/usr/bin/node /opt/jira-mcp/index.js --stdio
WorkingDirectory=/var/lib/soda/mcp/jira
Environment=JIRA_URL=https://jira.example.com "LOG_LEVEL=warn"

; comments with a semicolon work too
[Bridge]
Listen=127.0.0.1:18101
Auth=none
TokenFile=/run/soda/jira.token
MaxSessions=3
MaxConnections=7
IdleTimeout=20min
CallTimeout=1h 30min
StartTimeout=2s
ReadTimeout=250ms
DrainTimeout=90
MaxHeaderBytes=8K
MaxBodySize=1M
StderrLinesPerSecond=11
Metrics=no
MetricsTextfile=yes

[Limits]
MemoryMax=512M
TasksMax=64
CPUWeight=200
`

func TestParseFull(t *testing.T) {
	got, err := Parse("/etc/soda/mcp/jira.conf", "jira", []byte(fullConf))
	if err != nil {
		t.Fatalf("Parse: unexpected error: %v", err)
	}
	want := Server{
		Name:    "jira",
		Path:    "/etc/soda/mcp/jira.conf",
		Command: []string{"/usr/bin/node", "/opt/jira-mcp/index.js", "--stdio"},
		Dir:     "/var/lib/soda/mcp/jira",
		Env:     []string{"JIRA_URL=https://jira.example.com", "LOG_LEVEL=warn"},
		Bridge: Bridge{
			Listen:               "127.0.0.1:18101",
			Auth:                 "none",
			TokenFile:            "/run/soda/jira.token",
			MaxSessions:          3,
			IdleTimeout:          20 * time.Minute,
			CallTimeout:          90 * time.Minute,
			StartTimeout:         2 * time.Second,
			MaxConnections:       7,
			MaxHeaderBytes:       8 << 10,
			ReadTimeout:          250 * time.Millisecond,
			MaxBodyBytes:         1 << 20,
			StderrLinesPerSecond: 11,
			DrainTimeout:         90 * time.Second,
			MetricsTextfile:      true,
		},
		Limits: Limits{
			MemoryMax: 512 << 20,
			TasksMax:  64,
			CPUWeight: 200,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse full file:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseDefaults(t *testing.T) {
	got, err := Parse("x.conf", "jira", []byte("[Server]\nExecStart=/bin/true\n"))
	if err != nil {
		t.Fatalf("Parse: unexpected error: %v", err)
	}
	want := Defaults("jira")
	want.Path = "x.conf"
	want.Command = []string{"/bin/true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse minimal file:\n got %+v\nwant %+v", got, want)
	}
	// Spell the defaults out so that an accidental change to Defaults shows.
	checks := []struct {
		name      string
		got, want any
	}{
		{"Listen", got.Bridge.Listen, "127.0.0.1:18100"},
		{"Auth", got.Bridge.Auth, "token"},
		{"TokenFile", got.Bridge.TokenFile, "/var/lib/soda/mcp/jira.token"},
		{"MaxSessions", got.Bridge.MaxSessions, 8},
		{"IdleTimeout", got.Bridge.IdleTimeout, 15 * time.Minute},
		{"CallTimeout", got.Bridge.CallTimeout, 5 * time.Minute},
		{"StartTimeout", got.Bridge.StartTimeout, 10 * time.Second},
		{"MaxConnections", got.Bridge.MaxConnections, 32},
		{"MaxHeaderBytes", got.Bridge.MaxHeaderBytes, 16 << 10},
		{"ReadTimeout", got.Bridge.ReadTimeout, 10 * time.Second},
		{"MaxBodyBytes", got.Bridge.MaxBodyBytes, int64(4 << 20)},
		{"StderrLinesPerSecond", got.Bridge.StderrLinesPerSecond, 50},
		{"DrainTimeout", got.Bridge.DrainTimeout, 30 * time.Second},
		{"Dir", got.Dir, ""},
		{"Env", len(got.Env), 0},
		{"Limits", got.Limits, Limits{}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("default %s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		name    string
		conf    string
		wantCmd []string
		wantEnv []string
	}{
		{
			name:    "continuation lines",
			conf:    "[Server]\nExecStart=/usr/bin/node \\\n    /opt/x/index.js \\\n    --stdio\n",
			wantCmd: []string{"/usr/bin/node", "/opt/x/index.js", "--stdio"},
		},
		{
			name:    "continuation without space before backslash",
			conf:    "[Server]\nExecStart=/bin/foo\\\n--bar\n",
			wantCmd: []string{"/bin/foo", "--bar"},
		},
		{
			name:    "continued Environment",
			conf:    "[Server]\nExecStart=/bin/true\nEnvironment=A=1 \\\n  B=2\n",
			wantCmd: []string{"/bin/true"},
			wantEnv: []string{"A=1", "B=2"},
		},
		{
			name:    "repeated Environment accumulates",
			conf:    "[Server]\nEnvironment=A=1\nExecStart=/bin/true\nEnvironment=B=2 C=3\nEnvironment=A=4\n",
			wantCmd: []string{"/bin/true"},
			wantEnv: []string{"A=1", "B=2", "C=3", "A=4"},
		},
		{
			name:    "Environment quoting and empty value",
			conf:    "[Server]\nExecStart=/bin/true\nEnvironment=\"GREETING=hello world\" 'X=a b' EMPTY= Q=a\\ b\n",
			wantCmd: []string{"/bin/true"},
			wantEnv: []string{"GREETING=hello world", "X=a b", "EMPTY=", "Q=a b"},
		},
		{
			name:    "quoted ExecStart words",
			conf:    "[Server]\nExecStart=/bin/prog \"a b\" 'c' \"it's\" 'say \"hi\"' x\\ y \\\"q\\\" \"\"\n",
			wantCmd: []string{"/bin/prog", "a b", "c", "it's", `say "hi"`, "x y", `"q"`, ""},
		},
		{
			name:    "repeated ExecStart: last wins",
			conf:    "[Server]\nExecStart=/bin/one\nExecStart=/bin/two arg\n",
			wantCmd: []string{"/bin/two", "arg"},
		},
		{
			name:    "spaces around key and value",
			conf:    "[Server]\n  ExecStart =   /bin/true   \n",
			wantCmd: []string{"/bin/true"},
		},
		{
			name:    "CRLF line endings",
			conf:    "[Server]\r\nExecStart=/bin/true -x\r\nEnvironment=A=1\r\n",
			wantCmd: []string{"/bin/true", "-x"},
			wantEnv: []string{"A=1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("t.conf", "t", []byte(tt.conf))
			if err != nil {
				t.Fatalf("Parse(%q): unexpected error: %v", tt.conf, err)
			}
			if !reflect.DeepEqual(got.Command, tt.wantCmd) {
				t.Errorf("Command = %q, want %q", got.Command, tt.wantCmd)
			}
			if !reflect.DeepEqual(got.Env, tt.wantEnv) {
				t.Errorf("Env = %q, want %q", got.Env, tt.wantEnv)
			}
		})
	}
}

func TestParseUserGroup(t *testing.T) {
	for _, c := range []struct{ conf, user, group string }{
		{"[Server]\nExecStart=/bin/true\n", "", ""},
		{"[Server]\nExecStart=/bin/true\nUser=soda-mcp\n", "soda-mcp", ""},
		{"[Server]\nExecStart=/bin/true\nUser=1000\nGroup=nogroup\n", "1000", "nogroup"},
	} {
		got, err := Parse("t.conf", "t", []byte(c.conf))
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.conf, err)
		}
		if got.User != c.user || got.Group != c.group {
			t.Errorf("Parse(%q): User %q Group %q, want %q %q", c.conf, got.User, got.Group, c.user, c.group)
		}
	}
}

// parseErrorCase is a file Parse refuses and the error it gives.
type parseErrorCase struct {
	name string
	conf string
	line int    // 0: the error has no line
	key  string // "Section.Key", or "" for syntax errors
	msg  string // substring of the error's cause
}

// parseErrorCases are TestParseErrors's table and seeds of
// FuzzParseOptions.
func parseErrorCases() []parseErrorCase {
	// head puts ExecStart on line 2 so that error lines are never 1 by luck.
	const head = "[Server]\nExecStart=/bin/true\n"
	return []parseErrorCase{
		{"unknown key", head + "[Bridge]\nListen=127.0.0.1:1\nMaxSesions=3\n", 5, "Bridge.MaxSesions", "unknown key"},
		{"unknown Server key", head + "Users=nobody\n", 3, "Server.Users", "unknown key"},
		{"bad User", head + "User=no body\n", 3, "Server.User", "not a user or group name"},
		{"bad Group", head + "Group=-x\n", 3, "Server.Group", "not a user or group name"},
		{"unknown Limits key", head + "[Limits]\nMemoryHigh=1G\n", 4, "Limits.MemoryHigh", "unknown key"},
		{"unknown section", head + "\n[Service]\nType=simple\n", 5, "Service.Type", "unknown section [Service]"},
		{"bad time span", head + "[Bridge]\nIdleTimeout=5 fortnights\n", 4, "Bridge.IdleTimeout", "not a time span"},
		{"zero time span", head + "[Bridge]\nCallTimeout=0\n", 4, "Bridge.CallTimeout", "must be positive"},
		{"bad size", head + "[Limits]\nMemoryMax=lots\n", 4, "Limits.MemoryMax", "not a size"},
		{"bad header size", head + "[Bridge]\nMaxHeaderBytes=4X\n", 4, "Bridge.MaxHeaderBytes", "not a size"},
		{"zero body size", head + "[Bridge]\nMaxBodySize=0\n", 4, "Bridge.MaxBodySize", "not a size"},
		{"listen on any address", head + "[Bridge]\nListen=0.0.0.0:80\n", 4, "Bridge.Listen", "not a loopback address"},
		{"listen on private address", head + "[Bridge]\n# comment\n\nListen=10.0.0.1:80\n", 6, "Bridge.Listen", "not a loopback address"},
		{"listen without port", head + "[Bridge]\nListen=127.0.0.1\n", 4, "Bridge.Listen", "not host:port"},
		{"relative WorkingDirectory", head + "WorkingDirectory=var/lib/x\n", 3, "Server.WorkingDirectory", "not an absolute path"},
		{"relative TokenFile", head + "[Bridge]\nTokenFile=tok\n", 4, "Bridge.TokenFile", "not an absolute path"},
		{"bad Auth", head + "[Bridge]\nAuth=basic\n", 4, "Bridge.Auth", "want token or none"},
		{"non-positive MaxSessions", head + "[Bridge]\nMaxSessions=0\n", 4, "Bridge.MaxSessions", "not a positive integer"},
		{"non-numeric MaxConnections", head + "[Bridge]\nMaxConnections=many\n", 4, "Bridge.MaxConnections", "not a positive integer"},
		{"CPUWeight too high", head + "[Limits]\nCPUWeight=10001\n", 4, "Limits.CPUWeight", "above 10000"},
		{"negative TasksMax", head + "[Limits]\nTasksMax=-1\n", 4, "Limits.TasksMax", "not a positive integer"},
		{"bad Environment word", head + "Environment=A=1 NOEQUALS\n", 3, "Server.Environment", `"NOEQUALS" is not KEY=VALUE`},
		{"Environment with empty name", head + "Environment==x\n", 3, "Server.Environment", "is not KEY=VALUE"},
		{"missing ExecStart", "[Bridge]\nListen=127.0.0.1:1\n", 0, "Server.ExecStart", "missing"},
		{"empty file", "", 0, "Server.ExecStart", "missing"},
		{"empty ExecStart", "[Server]\n\nExecStart=\n", 3, "Server.ExecStart", "empty command"},
		{"unterminated double quote", "[Server]\n\nExecStart=/bin/echo \"abc\n", 3, "Server.ExecStart", `unterminated " quote`},
		{"unterminated single quote", head + "Environment='A=1\n", 3, "Server.Environment", "unterminated ' quote"},
		{"trailing backslash at end of file", "[Server]\nExecStart=/bin/echo \\", 2, "Server.ExecStart", "trailing backslash"},
		{"line without '='", head + "[Bridge]\nListen\n", 4, "", "expected Key=Value"},
		{"option before any section", "# comment\nExecStart=/bin/true\n[Server]\n", 2, "", "before any [Section]"},
		{"malformed section header", head + "[Bridge\nListen=127.0.0.1:1\n", 3, "", "malformed section header"},
		{"error after a continued line", "[Server]\nExecStart=/bin/echo \\\n  a \\\n  b\nBogus=1\n", 5, "Server.Bogus", "unknown key"},
		{"second of repeated keys is at fault", head + "[Bridge]\nIdleTimeout=1min\nIdleTimeout=soon\n", 5, "Bridge.IdleTimeout", "not a time span"},
	}
}

func TestParseErrors(t *testing.T) {
	const file = "/etc/soda/mcp/t.conf"
	for _, tt := range parseErrorCases() {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(file, "t", []byte(tt.conf))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error", tt.conf)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error %v (%T) is not a *config.Error", err, err)
			}
			if ce.File != file || ce.Line != tt.line || ce.Key != tt.key {
				t.Errorf("error location = (%q, line %d, key %q), want (%q, line %d, key %q)", ce.File, ce.Line, ce.Key, file, tt.line, tt.key)
			}
			// The message itself must name file, line and key for the user.
			loc := file
			if tt.line > 0 {
				loc = file + ":" + strconv.Itoa(tt.line)
			}
			wantPrefix := loc + ": "
			if tt.key != "" {
				wantPrefix += tt.key + ": "
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, wantPrefix) {
				t.Errorf("error %q does not start with %q", msg, wantPrefix)
			}
			if !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q does not mention %q", msg, tt.msg)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	cause := errors.New("boom")
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{"file only", &Error{File: "f.conf", Err: cause}, "f.conf: boom"},
		{"file and line", &Error{File: "f.conf", Line: 3, Err: cause}, "f.conf:3: boom"},
		{"file, line and key", &Error{File: "f.conf", Line: 3, Key: "Bridge.Listen", Err: cause}, "f.conf:3: Bridge.Listen: boom"},
		{"file and key", &Error{File: "f.conf", Key: "Server.ExecStart", Err: cause}, "f.conf: Server.ExecStart: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			if !errors.Is(tt.err, cause) {
				t.Errorf("errors.Is(%v, cause) = false; Unwrap must return the cause", tt.err)
			}
		})
	}
}

func TestParseTimespan(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{in: "90", want: 90 * time.Second},
		{in: " 90 ", want: 90 * time.Second},
		{in: "30s", want: 30 * time.Second},
		{in: "30sec", want: 30 * time.Second},
		{in: "1second", want: time.Second},
		{in: "2seconds", want: 2 * time.Second},
		{in: "5min", want: 5 * time.Minute},
		{in: "5m", want: 5 * time.Minute},
		{in: "1minute", want: time.Minute},
		{in: "3minutes", want: 3 * time.Minute},
		{in: "1h 30min", want: 90 * time.Minute},
		{in: "1h30min", want: 90 * time.Minute},
		{in: "1 h", want: time.Hour},
		{in: "2hr", want: 2 * time.Hour},
		{in: "1hour", want: time.Hour},
		{in: "2hours", want: 2 * time.Hour},
		{in: "250ms", want: 250 * time.Millisecond},
		{in: "250msec", want: 250 * time.Millisecond},
		{in: "500us", want: 500 * time.Microsecond},
		{in: "500usec", want: 500 * time.Microsecond},
		{in: "2 days", want: 48 * time.Hour},
		{in: "1day", want: 24 * time.Hour},
		{in: "1d 2h 3min 4s 5ms", want: 24*time.Hour + 2*time.Hour + 3*time.Minute + 4*time.Second + 5*time.Millisecond},
		{in: "5min 30", want: 5*time.Minute + 30*time.Second},
		{in: "", wantErr: "empty time span"},
		{in: "   ", wantErr: "empty time span"},
		{in: "0", wantErr: "must be positive"},
		{in: "0s 0ms", wantErr: "must be positive"},
		{in: "min", wantErr: "not a time span"},
		{in: "-5s", wantErr: "not a time span"},
		{in: "1.5s", wantErr: "not a time span"},
		{in: "5x", wantErr: "not a time span"},
		{in: "5 fortnights", wantErr: "not a time span"},
		{in: "5months", wantErr: "not a time span"}, // "m" must not match a prefix of a longer word
		{in: "5w", wantErr: "not a time span"},      // weeks are not supported
		{in: "99999999999999999999", wantErr: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTimespan(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseTimespan(%q) = %v, want an error mentioning %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("ParseTimespan(%q) error %q does not mention %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTimespan(%q): unexpected error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseTimespan(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "4096", want: 4096},
		{in: "1", want: 1},
		{in: " 4096 ", want: 4096},
		{in: "512K", want: 512 << 10},
		{in: "512k", want: 512 << 10},
		{in: "4M", want: 4 << 20},
		{in: "4m", want: 4 << 20},
		{in: "1G", want: 1 << 30},
		{in: "2T", want: 2 << 40},
		{in: "4611686018427387904", want: 1 << 62},
		{in: "", wantErr: true},
		{in: "K", wantErr: true},
		{in: "0", wantErr: true},
		{in: "0K", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "-4M", wantErr: true},
		{in: "1.5G", want: 3 << 29},
		{in: "0.5K", want: 512},
		{in: "2.25m", want: 9 << 18},
		{in: "0.000000001K", wantErr: true}, // rounds down to 0 bytes
		{in: "1.5", wantErr: true},          // a fraction of a byte
		{in: "1.G", wantErr: true},
		{in: ".5G", wantErr: true},
		{in: "1.0000000001G", wantErr: true}, // more than 9 decimals
		{in: "1e3", wantErr: true},
		{in: "+4M", wantErr: true},
		{in: "4194303.99T", want: 4194303<<40 + 99*(1<<40)/100},
		{in: "4194304.5T", wantErr: true}, // above 2^62
		{in: "4MB", wantErr: true},
		{in: "4 M", wantErr: true},
		{in: "lots", wantErr: true},
		{in: "4611686018427387905", wantErr: true}, // above 1<<62
		{in: "4194305T", wantErr: true},            // overflows after the multiplier
		{in: "99999999999999999999", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseBytes(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseBytes(%q) = %d, want an error", tt.in, got)
				}
				if !strings.Contains(err.Error(), "not a size") {
					t.Errorf("ParseBytes(%q) error %q should say it is not a size", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseBytes(%q): unexpected error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseBytes(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string
	}{
		{name: "empty", in: "", want: nil},
		{name: "blanks only", in: " \t ", want: nil},
		{name: "plain words", in: "/bin/echo a  b\tc", want: []string{"/bin/echo", "a", "b", "c"}},
		{name: "newline separates", in: "a\nb", want: []string{"a", "b"}},
		{name: "double quotes group", in: `echo "a b"`, want: []string{"echo", "a b"}},
		{name: "single quotes group", in: `echo 'c'`, want: []string{"echo", "c"}},
		{name: "mixed quotes", in: `"a b" 'c'`, want: []string{"a b", "c"}},
		{name: "other quote inside", in: `"it's" 'say "hi"'`, want: []string{"it's", `say "hi"`}},
		{name: "quotes join with adjacent text", in: `--opt="a b"c`, want: []string{"--opt=a bc"}},
		{name: "empty quotes make an empty word", in: `a "" ''`, want: []string{"a", "", ""}},
		{name: "backslash escapes space", in: `a\ b c`, want: []string{"a b", "c"}},
		{name: "backslash escapes quote", in: `\"q\" \'`, want: []string{`"q"`, "'"}},
		{name: "backslash escapes backslash", in: `C:\\dir`, want: []string{`C:\dir`}},
		{name: "backslash inside double quotes", in: `"a\"b"`, want: []string{`a"b`}},
		{name: "backslash before letter keeps the letter", in: `a\nb`, want: []string{"anb"}},
		{name: "unicode", in: "écho «x y»", want: []string{"écho", "«x", "y»"}},
		{name: "unterminated double quote", in: `echo "abc`, wantErr: `unterminated " quote`},
		{name: "unterminated single quote", in: `echo 'abc`, wantErr: "unterminated ' quote"},
		{name: "trailing backslash", in: `echo \`, wantErr: "trailing backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SplitCommand(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("SplitCommand(%q) = %q, %v; want error mentioning %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SplitCommand(%q): unexpected error: %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SplitCommand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCheckLoopback(t *testing.T) {
	tests := []struct {
		addr    string
		wantErr string // "" means valid
	}{
		{"127.0.0.1:1", ""},
		{"127.0.0.1:0", ""},
		{"127.0.0.1:65535", ""},
		{"127.1.2.3:80", ""},
		{"[::1]:80", ""},
		{"localhost:80", ""},
		{"0.0.0.0:1", "not a loopback address"},
		{"[::]:1", "not a loopback address"},
		{"10.0.0.1:80", "not a loopback address"},
		{"192.168.1.1:80", "not a loopback address"},
		{"example.com:80", "not a loopback address"},
		{":80", "not a loopback address"},
		{"127.0.0.1", "not host:port"},
		{"localhost", "not host:port"},
		{"[::1]", "not host:port"},
		{"::1:80", "not host:port"},
		{"127.0.0.1:65536", "not a number from 0 to 65535"},
		{"127.0.0.1:http", "not a number from 0 to 65535"},
		{"127.0.0.1:", "not a number from 0 to 65535"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			err := CheckLoopback(tt.addr)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("CheckLoopback(%q) = %v, want nil", tt.addr, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckLoopback(%q) = nil, want an error mentioning %q", tt.addr, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CheckLoopback(%q) = %q, want it to mention %q", tt.addr, err, tt.wantErr)
			}
		})
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"jira", true},
		{"a", true},
		{"Jira-2_prod.eu", true},
		{"0day", true},
		{strings.Repeat("x", 64), true},
		{"", false},
		{strings.Repeat("x", 65), false},
		{".hidden", false},
		{"-flag", false},
		{"a/b", false},
		{"../etc", false},
		{"a b", false},
		{"a@b", false},
		{"jira.conf\n", false},
		{"é", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidName(tt.name)
			if tt.ok && err != nil {
				t.Errorf("ValidName(%q) = %v, want nil", tt.name, err)
			}
			if !tt.ok && err == nil {
				t.Errorf("ValidName(%q) = nil, want an error", tt.name)
			}
		})
	}
}

func TestParsePathFor(t *testing.T) {
	if got, want := PathFor("/etc/soda/mcp", "jira"), "/etc/soda/mcp/jira.conf"; got != want {
		t.Errorf("PathFor = %q, want %q", got, want)
	}
}

func TestParseViaLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(t *testing.T, name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("name from file name", func(t *testing.T) {
		p := write(t, "jira-prod.conf", "[Server]\nExecStart=/bin/true\n")
		cfg, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%q): %v", p, err)
		}
		if cfg.Name != "jira-prod" {
			t.Errorf("Name = %q, want %q", cfg.Name, "jira-prod")
		}
		if cfg.Path != p {
			t.Errorf("Path = %q, want %q", cfg.Path, p)
		}
		if want := "/var/lib/soda/mcp/jira-prod.token"; cfg.Bridge.TokenFile != want {
			t.Errorf("default TokenFile = %q, want %q", cfg.Bridge.TokenFile, want)
		}
	})
	t.Run("invalid file name", func(t *testing.T) {
		p := write(t, "bad name.conf", "[Server]\nExecStart=/bin/true\n")
		_, err := Load(p)
		if err == nil {
			t.Fatalf("Load(%q) succeeded, want an invalid-name error", p)
		}
		if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `"bad name"`) {
			t.Errorf("Load error %q should name the file and the bad instance name", err)
		}
	})
	t.Run("hidden file name", func(t *testing.T) {
		p := write(t, ".conf", "[Server]\nExecStart=/bin/true\n")
		if _, err := Load(p); err == nil {
			t.Errorf("Load(%q) succeeded, want an error for an empty instance name", p)
		}
	})
	t.Run("errors name the file", func(t *testing.T) {
		p := write(t, "broken.conf", "[Server]\nExecStart=/bin/true\nColour=blue\n")
		_, err := Load(p)
		if err == nil {
			t.Fatal("Load succeeded, want an error")
		}
		if want := p + ":3: Server.Colour: "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Load error %q, want prefix %q", err, want)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		p := filepath.Join(dir, "absent.conf")
		_, err := Load(p)
		if err == nil {
			t.Fatal("Load of a missing file succeeded")
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Load error %v should wrap os.ErrNotExist", err)
		}
	})
}

func TestParseValidate(t *testing.T) {
	tests := []struct {
		name string
		s    Server
		key  string
	}{
		{"ok", Server{Command: []string{"x"}, Bridge: Bridge{Listen: "127.0.0.1:1"}}, ""},
		{"no command", Server{Bridge: Bridge{Listen: "127.0.0.1:1"}}, "Server.ExecStart"},
		{"non-loopback", Server{Command: []string{"x"}, Bridge: Bridge{Listen: "0.0.0.0:1"}}, "Bridge.Listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if tt.key == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tt.key {
				t.Errorf("Validate() = %v, want a *config.Error for %s", err, tt.key)
			}
		})
	}
}

func TestParseTimespanOverflow(t *testing.T) {
	for _, in := range []string{"6000000h", "106752d", "9223372036854775807us 1s"} {
		if d, err := ParseTimespan(in); err == nil {
			t.Errorf("ParseTimespan(%q) = %s, want an error", in, d)
		}
	}
	if d, err := ParseTimespan("3650d"); err != nil || d != 3650*24*time.Hour {
		t.Errorf("ParseTimespan(3650d) = %s, %v", d, err)
	}
}

// parseOptionsCase is a file and what ParseOptions makes of it.
type parseOptionsCase struct {
	name    string
	in      string
	want    []Option
	wantErr string
}

// parseOptionsCases are TestParseOptions's table and seeds of
// FuzzParseOptions.
func parseOptionsCases() []parseOptionsCase {
	return []parseOptionsCase{
		{
			name: "lines, repeats and continuations",
			in:   "# c\n[A]\nX=1\n\n[B]\nY=a \\\n  b\nX=2\n[A]\nX=3\n",
			want: []Option{
				{Section: "A", Name: "X", Value: "1", Line: 3},
				{Section: "B", Name: "Y", Value: "a    b", Line: 6},
				{Section: "B", Name: "X", Value: "2", Line: 8},
				{Section: "A", Name: "X", Value: "3", Line: 10},
			},
		},
		// Where the lines used to be found otherwise than go-systemd reads
		// the values (found by FuzzParseOptions): a comment ending in a
		// backslash goes on, a backslash before a blank or a "\r" ends
		// nothing, a key's bytes that are not UTF-8 are read as U+FFFD.
		{
			name: "comment continued",
			in:   "[A]\n# c \\\nX=1\nX=2\n",
			want: []Option{{Section: "A", Name: "X", Value: "2", Line: 4}},
		},
		{
			name: "backslash before a blank",
			in:   "[A]\nX=a\\ \nX=b\n",
			want: []Option{{Section: "A", Name: "X", Value: "a\\", Line: 2}, {Section: "A", Name: "X", Value: "b", Line: 3}},
		},
		{
			name: "backslash before CR",
			in:   "[A]\r\nX=a\\\r\nX=b",
			want: []Option{{Section: "A", Name: "X", Value: "a\\", Line: 2}, {Section: "A", Name: "X", Value: "b", Line: 3}},
		},
		{
			name: "key not UTF-8",
			in:   "[A]\n\x8c=1\n",
			want: []Option{{Section: "A", Name: "\ufffd", Value: "1", Line: 2}},
		},
		{name: "key before section", in: "X=1\n", wantErr: "f.conf:1:"},
		{name: "no equals", in: "[A]\nfoo\n", wantErr: "f.conf:2:"},
		{name: "bad header", in: "[A\n", wantErr: "f.conf:1:"},
		{name: "line too long", in: "[A]\nX=" + strings.Repeat("x", 5000) + "\n", wantErr: "too long"},
	}
}

func TestParseOptions(t *testing.T) {
	for _, tt := range parseOptionsCases() {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseOptions("f.conf", []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseOptions: error %v, want one containing %q", err, tt.wantErr)
				}
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("ParseOptions: error %T is not a *config.Error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseOptions: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseOptions:\n got %+v\nwant %+v", got, tt.want)
			}
			if got[0].Key() != "A."+tt.want[0].Name {
				t.Fatalf("Key() = %q", got[0].Key())
			}
		})
	}
}

// FuzzParseOptions reads files in systemd's INI syntax as soda reads its
// configuration and sandbox profiles (ParseOptions, Parse). Errors are
// *Error naming the file, and a line of it when they name one. Every
// option is found on its own line, in file order: the line holds its
// name before an '=' (go-systemd's parser, which reads the values, and
// scanLines, which finds the lines, read the same file).
func FuzzParseOptions(f *testing.F) {
	f.Add([]byte(fullConf))
	for _, tt := range parseErrorCases() {
		f.Add([]byte(tt.conf))
	}
	for _, tt := range parseOptionsCases() {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "f.conf"
		lines := strings.Split(string(data), "\n")
		checkErr := func(err error) {
			t.Helper()
			var ce *Error
			if !errors.As(err, &ce) || ce.File != file || ce.Line < 0 || ce.Line > len(lines) || !strings.HasPrefix(err.Error(), file) {
				t.Fatalf("%q: error %v (%T)", data, err, err)
			}
		}
		opts, err := ParseOptions(file, data)
		if err != nil {
			checkErr(err)
		}
		for i, o := range opts {
			if o.Line < 1 || o.Line > len(lines) || i > 0 && o.Line <= opts[i-1].Line {
				t.Fatalf("%q: option %d %s on line %d", data, i, o.Key(), o.Line)
			}
			name, _, ok := strings.Cut(strings.TrimSpace(lines[o.Line-1]), "=")
			if !ok || string([]rune(strings.TrimSpace(name))) != o.Name { // (bytes not UTF-8 are each read as U+FFFD)
				t.Fatalf("%q: option %s on line %d, which is %q", data, o.Key(), o.Line, lines[o.Line-1])
			}
			if strings.Contains(o.Value, "\\\n") || o.Value != strings.TrimSpace(o.Value) {
				t.Fatalf("%q: option %s = %q", data, o.Key(), o.Value)
			}
		}
		if _, err := Parse(file, "t", data); err != nil {
			checkErr(err)
		}
	})
}
