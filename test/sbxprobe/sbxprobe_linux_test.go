package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseStatusLine(t *testing.T) {
	tests := []struct {
		line    string
		want    int
		wantErr bool
	}{
		{"HTTP/1.1 200 Connection established\r\n", 200, false},
		{"HTTP/1.0 403 Forbidden\n", 403, false},
		{"HTTP/1.1 431\r\n", 431, false},
		{"SSH-2.0-OpenSSH\r\n", 0, true},
		{"HTTP/1.1 abc\r\n", 0, true},
		{"HTTP/1.1 42 too small\r\n", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := parseStatusLine(tt.line)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseStatusLine(%q) = %d, %v; want %d, error %v", tt.line, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDNSQuery(t *testing.T) {
	tests := []struct {
		name string
		want []byte
	}{
		{"a.bc", []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 2, 'b', 'c', 0, 0, 1, 0, 1}},
		{"a.bc.", []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 2, 'b', 'c', 0, 0, 1, 0, 1}},
	}
	for _, tt := range tests {
		if got := dnsQuery(0x1234, tt.name); !bytes.Equal(got, tt.want) {
			t.Errorf("dnsQuery(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestEnvNames(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{[]string{"B=1", "A=2=3", "B=4", "", "C="}, []string{"A", "B", "C"}},
		{nil, nil},
	}
	for _, tt := range tests {
		if got := envNames(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("envNames(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseCgroup(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"0::/user.slice/soda-1.scope\n", "/user.slice/soda-1.scope", false},
		{"4:memory:/x\n1:cpu:/\n0::/\n", "/", false},
		{"4:memory:/x\n", "", true},
	}
	for _, tt := range tests {
		got, err := parseCgroup(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("parseCgroup(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestStatusAndCaps(t *testing.T) {
	st := parseStatus("Name:\tsbxprobe\nNoNewPrivs:\t1\nCapEff:\t0000000000000000\nCapPrm:\t000001ffffffffff\n")
	tests := []struct {
		key      string
		want     string
		wantZero bool
	}{
		{"Name", "sbxprobe", false},
		{"NoNewPrivs", "1", false},
		{"CapEff", "0000000000000000", true},
		{"CapPrm", "000001ffffffffff", false},
	}
	for _, tt := range tests {
		if st[tt.key] != tt.want {
			t.Errorf("parseStatus()[%q] = %q, want %q", tt.key, st[tt.key], tt.want)
		}
		if strings.HasPrefix(tt.key, "Cap") && capsZero(st[tt.key]) != tt.wantZero {
			t.Errorf("capsZero(%q) = %v, want %v", st[tt.key], !tt.wantZero, tt.wantZero)
		}
	}
}

func TestGated(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		deny        []syscall.Errno
		wantBlocked bool
		wantErrno   string
	}{
		{"success", nil, nil, false, ""},
		{"seccomp", unix.EPERM, nil, true, "EPERM"},
		{"no syscall", unix.ENOSYS, nil, true, "ENOSYS"},
		{"argument error", unix.EINVAL, nil, false, "EINVAL"},
		{"custom set", unix.ESRCH, []syscall.Errno{unix.ESRCH}, true, "ESRCH"},
		{"wrapped", fmt.Errorf("x: %w", unix.EACCES), nil, true, "EACCES"},
	}
	for _, tt := range tests {
		r := gated("call", tt.err, tt.deny...)
		if r.Blocked != tt.wantBlocked || r.Errno != tt.wantErrno {
			t.Errorf("%s: gated() = blocked %v errno %q; want %v %q", tt.name, r.Blocked, r.Errno, tt.wantBlocked, tt.wantErrno)
		}
	}
}

func TestChildResult(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		run                   childRun
		wantBlocked, wantInfo bool
		wantTimeout           bool
	}{
		{"escape", childRun{out: &childOut{OK: true, Detail: "ran"}}, false, false, false},
		{"denied", childRun{out: &childOut{Errno: "EPERM", Detail: "denied"}}, true, false, false},
		{"killed by seccomp", childRun{signal: unix.SIGSYS}, true, false, false},
		{"host lacks the ABI", childRun{out: &childOut{HostLacks: true, Detail: "faulted"}}, false, true, false},
		{"no report", childRun{code: 2, stderr: "fatal error: fault"}, false, false, false},
		{"timed out", childRun{timedOut: true}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.run.result("probe")
			if r.Blocked != tc.wantBlocked || r.Info != tc.wantInfo || r.Timeout != tc.wantTimeout {
				t.Fatalf("result() = %+v; want blocked %v, info %v, timeout %v", r, tc.wantBlocked, tc.wantInfo, tc.wantTimeout)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	rs := []Result{
		{Blocked: true}, {Blocked: false}, {Skipped: true}, {Info: true, Blocked: true}, {Blocked: true},
	}
	want := Summary{Total: 5, Blocked: 2, NotBlocked: 1, Skipped: 1, Info: 1}
	if got := summarize(rs); got != want {
		t.Errorf("summarize() = %+v, want %+v", got, want)
	}
}

func TestListFlag(t *testing.T) {
	tests := []struct {
		sets []string
		want []string
	}{
		{[]string{"a,b"}, []string{"a", "b"}},
		{[]string{" a , ,b", "c"}, []string{"a", "b", "c"}},
		{[]string{""}, nil},
	}
	for _, tt := range tests {
		var l listFlag
		for _, s := range tt.sets {
			l.Set(s)
		}
		if !reflect.DeepEqual([]string(l), tt.want) {
			t.Errorf("listFlag after %q = %q, want %q", tt.sets, l, tt.want)
		}
	}
}

// buildProbe compiles sbxprobe (statically, as the harness should) into
// a temporary directory.
func buildProbe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sbxprobe")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// serve accepts connections on ln until it is closed and hands each to h.
func serve(ln net.Listener, h func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			h(c)
		}()
	}
}

// listen opens a listener closed at the end of the test.
func listen(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// startFakeProxy runs a relay that lets everything through: CONNECT gets
// 200 and then an echo of the tunnel (nothing is ever dialled), any other
// request gets 200 OK. With it, every relay row must come out not blocked.
func startFakeProxy(t *testing.T) string {
	ln := listen(t, "tcp", "127.0.0.1:0")
	go serve(ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		for {
			h, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if strings.TrimRight(h, "\r\n") == "" {
				break
			}
		}
		if strings.HasPrefix(line, "CONNECT ") {
			io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
			io.Copy(c, br)
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	return ln.Addr().String()
}

// dnsAnswer answers a DNS query: A questions with 127.0.0.2, others with
// no records.
func dnsAnswer(q []byte) []byte {
	if len(q) < 12 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	resp := append([]byte{}, q[:i+5]...)
	resp[2], resp[3] = 0x81, 0x80 // response, RD, RA, NOERROR
	binary.BigEndian.PutUint16(resp[4:], 1)
	binary.BigEndian.PutUint16(resp[6:], 0)
	binary.BigEndian.PutUint16(resp[8:], 0)
	binary.BigEndian.PutUint16(resp[10:], 0)
	if qtype == 1 {
		binary.BigEndian.PutUint16(resp[6:], 1)
		resp = append(resp, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 2)
	}
	return resp
}

// startFakeDNS runs a loopback DNS server that resolves every name.
func startFakeDNS(t *testing.T) string {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n]); resp != nil {
				pc.WriteTo(resp, addr)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// freePort returns a loopback port that nothing listens on.
func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// runProbeBin runs the binary and returns its stdout.
func runProbeBin(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstderr: %s", cmd.Args, err, se.String())
	}
	return so.Bytes()
}

// runBattery runs the battery with args and extra files and decodes the
// report, checking its shape.
func runBattery(t *testing.T, bin string, env []string, extra []*os.File, args ...string) map[string]Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"battery"}, args...)...)
	cmd.Env, cmd.ExtraFiles = env, extra
	out := runProbeBin(t, cmd)
	var rep Report
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("battery output is not one report: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("battery printed more than one JSON value:\n%s", out)
	}
	if got := summarize(rep.Results); got != rep.Summary {
		t.Errorf("summary %+v does not match the rows (%+v)", rep.Summary, got)
	}
	byName := map[string]Result{}
	last := -1
	for _, r := range rep.Results {
		if r.Name == "" || r.Detail == "" {
			t.Errorf("row without name or detail: %+v", r)
		}
		if _, dup := byName[r.Name]; dup {
			t.Errorf("duplicate row name %q", r.Name)
		}
		if r.Row < last {
			t.Errorf("rows out of order at %q", r.Name)
		}
		if r.Timeout {
			t.Errorf("%s timed out: %s", r.Name, r.Detail)
		}
		last = r.Row
		byName[r.Name] = r
	}
	var b strings.Builder
	for _, r := range rep.Results {
		state := map[bool]string{true: "blocked", false: "NOT blocked"}[r.Blocked]
		if r.Skipped {
			state = "skipped"
		} else if r.Info {
			state = "info"
		}
		fmt.Fprintf(&b, "%2d %-40s %-11s %-12s %.110s\n", r.Row, r.Name, state, r.Errno, r.Detail)
	}
	t.Logf("summary %+v\n%s", rep.Summary, b.String())
	return byName
}

// hostEnv is the battery's environment: ours without the injection
// variables, plus extra.
func hostEnv(extra ...string) []string {
	var env []string
	for _, e := range os.Environ() {
		name, _, _ := strings.Cut(e, "=")
		if name == "SBXPROBE_TEST_SECRET" || name == "SBXPROBE_TEST_ABSENT" {
			continue
		}
		skip := false
		for _, v := range injectionVars {
			skip = skip || name == v
		}
		if !skip {
			env = append(env, e)
		}
	}
	return append(env, extra...)
}

// canRead reports whether this test process can read p.
func canRead(p string) bool {
	_, err := os.ReadFile(p)
	return err == nil
}

// TestUnconfined runs sbxprobe outside any sandbox, with every input
// pointing at loopback stand-ins that let everything through, and checks
// that the probes see the escapes: a probe that reported "blocked" here
// could not fail inside the sandbox either.
func TestUnconfined(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProbe(t)
	tmp := t.TempDir()
	root := os.Geteuid() == 0

	sock := filepath.Join(tmp, "host.sock")
	go serve(listen(t, "unix", sock), func(net.Conn) {})
	abstract := fmt.Sprintf("sbxprobe-test-%d", os.Getpid())
	go serve(listen(t, "unix", "@"+abstract), func(net.Conn) {})
	hostTCP := listen(t, "tcp", "127.0.0.1:0")
	go serve(hostTCP, func(net.Conn) {})
	port := hostTCP.Addr().(*net.TCPAddr).Port
	if ln6, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", port)); err == nil {
		t.Cleanup(func() { ln6.Close() })
		go serve(ln6, func(net.Conn) {})
	}
	proxy := startFakeProxy(t)
	dns := startFakeDNS(t)

	sleeper := exec.Command("sleep", "120")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	hostPID := sleeper.Process.Pid

	ws := filepath.Join(tmp, "ws")
	home := filepath.Join(tmp, "home")
	for _, d := range []string{ws, home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(home, ".bashrc"), []byte("# x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(tmp, "soda-planted")
	leak, err := os.Open(filepath.Join(home, ".bashrc"))
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()

	hostID := readHostIdentity(t)

	t.Run("battery", func(t *testing.T) {
		rows := runBattery(t, bin,
			hostEnv("SBXPROBE_TEST_SECRET=1", "PYTHONPATH=/nonexistent"),
			[]*os.File{leak},
			"--unix", sock,
			"--abstract", abstract,
			"--host-pid", strconv.Itoa(hostPID),
			"--host-tcp", strconv.Itoa(port),
			"--proxy", proxy,
			"--deny-connect", "denied.example:443,internal.example:22",
			"--allow-connect", "echo.example:7",
			"--workspace", ws,
			"--host-home", home,
			"--plant", planted,
			"--secret-env", "SBXPROBE_TEST_SECRET,SBXPROBE_TEST_ABSENT",
			"--offhost-tcp", fmt.Sprintf("127.0.0.1:%d", port),
			"--offhost-udp", dns,
			"--resolver", dns,
			"--host-machine-id", hostID.machineID,
			"--host-boot-id", hostID.bootID,
			"--host-cmdline-sha256", hostID.cmdlineSHA,
			"--host-macs", cmp.Or(hostID.macs, "00:00:5e:00:53:00"), // RFC 7042's documentation MAC when the host has none
		)
		for name, r := range rows {
			if r.Skipped {
				t.Errorf("%s skipped although every input was given: %s", name, r.Detail)
			}
		}
		_, planterr := os.Stat(planted)
		tests := []struct {
			name        string
			when        bool // the expectation applies
			wantBlocked bool
		}{
			// The brief's proofs that the probes detect escapes.
			{"socket AF_UNIX SOCK_STREAM", true, false},
			{"unshare CLONE_NEWUSER", root, false},
			{"memfd_create", true, false},
			{"io_uring_setup", readSysctl("kernel/io_uring_disabled") == "0", false},
			{"proc-pids", true, false},
			{"pid1 proc-environ", canRead("/proc/1/environ"), false},
			{"pid1 proc-environ", !canRead("/proc/1/environ"), true},
			// Every input pointed at something reachable.
			{"unix-path " + sock, true, false},
			{"abstract @" + abstract, true, false},
			{"host-pid kill0", true, false},
			{"host-pid ptrace", true, false},
			{"host-pid process_vm_readv", true, false},
			{"host-pid proc-mem", true, false},
			{"host-pid proc-environ", true, false},
			{"host-pid pidfd_getfd", true, false},
			{"signal pidfd_send_signal(host-pid,0)", true, false},
			{"signal rt_sigqueueinfo(host-pid,0)", true, false},
			{"host-tcp 127.0.0.1:" + strconv.Itoa(port), true, false},
			{"offhost-tcp 127.0.0.1:" + strconv.Itoa(port), true, false},
			{"dns-udp " + dns, true, false},
			{"dns-lookup", true, false},
			{"allowed-connect", true, false},
			{"deny-connect denied.example:443", true, false},
			{"proxy host-header mismatch", true, false},
			{"proxy plain GET", true, false},
			{"proxy oversize request line", true, false},
			{"proxy CONNECT 127.1:80", true, false},
			{"symlink host-home", true, false},
			{"plant " + planted, planterr == nil, false},
			{"secret-env SBXPROBE_TEST_SECRET", true, false},
			{"secret-env SBXPROBE_TEST_ABSENT", true, true},
			{"env-absent PYTHONPATH", true, false},
			{"env-absent LD_PRELOAD", true, true},
			{"inherited-fds", true, false},
			// Nothing filters system calls out here.
			{"ioctl TIOCSTI", true, false},
			{"ioctl TIOCSTI|1<<32", true, false},
			{"ptrace traceme", true, false},
			{"signal kill(-1,0)", true, false},
			{"perf_event_open", readSysctl("kernel/perf_event_paranoid") != "3", false},
			{"clone3", true, false},
			{"execveat AT_EMPTY_PATH", true, false},
			{"mount tmpfs", root, false},
			{"fsopen tmpfs", root, false},
			{"capabilities", root, false},
			{"no_new_privs", selfNoNewPrivs() == "0", false},
			// What names this host is what the probes read here.
			{"host-cgroup-path", hostID.cgroupNotRoot, false},
			{"host-machine-id", true, false},
			{"host-boot-id", true, false},
			{"host-cmdline", true, false},
			{"sys-net-devices", hostID.macs != "", false},
			{"host-macs", hostID.macs != "", false},
			{"sys-block", hostID.disks, false},
			// The fake relay holds this port, so nothing can shadow it.
			{"bind 127.0.0.1:" + proxy[strings.LastIndex(proxy, ":")+1:], true, true},
		}
		for _, tt := range tests {
			if !tt.when {
				continue
			}
			r, ok := rows[tt.name]
			if !ok {
				t.Errorf("no row %q", tt.name)
				continue
			}
			if r.Blocked != tt.wantBlocked {
				t.Errorf("%s: blocked = %v, want %v (%s %s)", tt.name, r.Blocked, tt.wantBlocked, r.Errno, r.Detail)
			}
		}
		if r := rows["proc-pids"]; len(r.List) <= 16 {
			t.Errorf("proc-pids lists %d processes, want more than 16 on the host", len(r.List))
		}
		if r := rows["inherited-fds"]; len(r.List) == 0 || r.List[0] != "3 -> "+leak.Name() {
			t.Errorf("inherited-fds = %q, want the leaked fd 3 -> %s first", r.List, leak.Name())
		}
		if r := rows["ioctl TIOCSTI"]; r.Errno != "ENOTTY" || r.Detail != "ENOTTY: not filtered" {
			t.Errorf("ioctl TIOCSTI = %+v, want ENOTTY: not filtered", r)
		}
		if r := rows["env-names"]; strings.Contains(r.Detail, "/nonexistent") {
			t.Errorf("env-names shows a value: %s", r.Detail)
		}
		if entries, _ := os.ReadDir(ws); len(entries) != 0 {
			t.Errorf("the battery left %d entries in the workspace", len(entries))
		}
	})

	t.Run("battery-without-inputs", func(t *testing.T) {
		rows := runBattery(t, bin, hostEnv(), nil, "--proxy", fmt.Sprintf("127.0.0.1:%d", freePort(t)))
		for _, name := range []string{"allowed-connect", "unix-path", "host-pid", "workspace", "exec-workspace",
			"plant", "secret-env", "host-tcp", "deny-connect", "proxy host-header mismatch",
			"host-machine-id", "host-boot-id", "host-cmdline", "host-macs"} {
			r, ok := rows[name]
			if !ok || !r.Skipped || !strings.HasPrefix(r.Detail, "no --") && !strings.HasPrefix(r.Detail, "needs --") {
				t.Errorf("%s: want a skipped row naming the missing flag, got %+v (present %v)", name, r, ok)
			}
		}
		for _, name := range []string{"proxy plain GET", "proxy CONNECT [::1]:80"} {
			if r := rows[name]; !r.Blocked || r.Errno != "ECONNREFUSED" {
				t.Errorf("%s with no relay: %+v, want blocked with ECONNREFUSED", name, r)
			}
		}
		// Off-host targets must not be contacted while routes lead out.
		if len(externalRoutes()) > 0 {
			for name, r := range rows {
				if (strings.HasPrefix(name, "offhost-") || strings.HasPrefix(name, "dns-")) && !r.Skipped {
					t.Errorf("%s ran although routes lead off the host: %s", name, r.Detail)
				}
			}
		}
	})

	t.Run("only", func(t *testing.T) {
		rows := runBattery(t, bin, hostEnv(), nil, "--only", "^(memfd_create|env-absent .*)$")
		if len(rows) != 1+len(injectionVars) {
			t.Errorf("--only selected %d rows, want %d", len(rows), 1+len(injectionVars))
		}
	})

	t.Run("connect", func(t *testing.T) {
		tests := []struct {
			name   string
			args   []string
			status int
			echo   string
			err    bool
		}{
			{"through the relay", []string{"--proxy", proxy, "echo.example:7"}, 200, "ping\n", false},
			{"custom line, flags last", []string{"echo.example:7", "--proxy", proxy, "--send", "hello\n"}, 200, "hello\n", false},
			{"no relay", []string{"--proxy", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "x:1"}, 0, "", true},
		}
		for _, tt := range tests {
			var got struct {
				Status int    `json:"status"`
				Echo   string `json:"echo"`
				Error  string `json:"error"`
			}
			out := runProbeBin(t, exec.Command(bin, append([]string{"connect"}, tt.args...)...))
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%s: %v: %s", tt.name, err, out)
			}
			if got.Status != tt.status || got.Echo != tt.echo || (got.Error != "") != tt.err {
				t.Errorf("%s: got %+v, want status %d echo %q error %v", tt.name, got, tt.status, tt.echo, tt.err)
			}
		}
	})

	t.Run("resources", func(t *testing.T) {
		tests := []struct {
			args  []string
			check func(map[string]any) error
		}{
			{[]string{"forkbomb", "3"}, func(m map[string]any) error {
				if m["started"] != 3.0 || m["error"] != "" {
					return errors.New("want 3 started, no error")
				}
				return nil
			}},
			{[]string{"memhog", "20"}, func(m map[string]any) error {
				if m["allocated_mb"] != 20.0 {
					return errors.New("want 20 MiB")
				}
				return nil
			}},
			{[]string{"cpuburn", "0.3"}, func(m map[string]any) error {
				cpu, _ := m["cpu_seconds"].(float64)
				wall, _ := m["wall_seconds"].(float64)
				// Its CPU time is its share of a loaded machine (0.08 s
				// of 0.36 s seen with 4 test runs on 2 cores): some.
				if wall < 0.3 || cpu <= 0.02 {
					return errors.New("want wall >= 0.3 s and some CPU time")
				}
				return nil
			}},
			{[]string{"orphan"}, func(m map[string]any) error {
				pid, _ := m["daemon_pid"].(float64)
				if pid <= 0 {
					return errors.New("want a daemon pid")
				}
				defer syscall.Kill(int(pid), syscall.SIGKILL)
				comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", int(pid)))
				if err != nil || strings.TrimSpace(string(comm)) != "sleep" {
					return fmt.Errorf("daemon %d is not a running sleep (%q, %v)", int(pid), comm, err)
				}
				return nil
			}},
		}
		for _, tt := range tests {
			out := runProbeBin(t, exec.Command(bin, tt.args...))
			var m map[string]any
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("%v: %v: %s", tt.args, err, out)
			}
			if err := tt.check(m); err != nil {
				t.Errorf("%v: %v: %s", tt.args, err, out)
			}
		}
	})
}

// readSysctl reads /proc/sys/NAME, trimmed ("" if unreadable).
func readSysctl(name string) string {
	v, _ := readTrim("/proc/sys/" + name)
	return v
}

// selfNoNewPrivs returns this test process's NoNewPrivs flag.
func selfNoNewPrivs() string {
	st, _ := selfStatus()
	return st["NoNewPrivs"]
}

// TestConfined runs the battery as nobody with no_new_privs, no
// capabilities and fresh network, pid, mount, IPC and UTS namespaces (a
// poor man's sandbox built from util-linux's unshare and setpriv), and
// checks that the probes report the denials this confinement implies: the
// other direction of TestUnconfined.
func TestConfined(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to build the confinement")
	}
	unshare, err1 := exec.LookPath("unshare")
	setpriv, err2 := exec.LookPath("setpriv")
	if err1 != nil || err2 != nil {
		t.Skip("needs unshare and setpriv (util-linux)")
	}
	nsArgs := []string{"--net", "--pid", "--fork", "--mount-proc", "--ipc", "--uts"}
	if out, err := exec.Command(unshare, append(nsArgs, "true")...).CombinedOutput(); err != nil {
		t.Skipf("cannot create namespaces here: %v: %s", err, out)
	}
	bin := buildProbe(t)
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	// Let nobody reach the binary and the workspace.
	for _, p := range []string{bin, ws} {
		for d := filepath.Dir(p); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(nsArgs, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--no-new-privs",
		"--inh-caps=-all", "--bounding-set=-all", bin, "battery", "--workspace", ws)
	cmd := exec.CommandContext(ctx, unshare, args...)
	cmd.Env = hostEnv()
	var rep Report
	if err := json.Unmarshal(runProbeBin(t, cmd), &rep); err != nil {
		t.Fatalf("bad report: %v", err)
	}
	rows := map[string]Result{}
	for _, r := range rep.Results {
		rows[r.Name] = r
	}
	t.Logf("confined summary %+v", rep.Summary)
	tests := []struct {
		name      string
		when      bool
		wantErrno string // "" accepts any
	}{
		{"capabilities", true, ""},
		{"no_new_privs", true, ""},
		{"setuid su", true, ""},
		{"proc-pids", true, ""},
		{"pid1 proc-environ", true, ""},
		{"pid1 proc-mem", true, ""},
		{"signal kill(-1,0)", true, "ESRCH"},
		{"signal pidfd_send_signal(1,0)", true, ""},
		{"unshare CLONE_NEWNS", true, "EPERM"},
		{"setns /proc/1/ns/net", true, "EPERM"},
		{"mount tmpfs", true, "EPERM"},
		{"fsopen tmpfs", true, "EPERM"},
		{"open_tree OPEN_TREE_CLONE", true, "EPERM"},
		{"pivot_root", true, "EPERM"},
		{"chroot /tmp", true, "EPERM"},
		{"bpf BPF_PROG_LOAD", readSysctl("kernel/unprivileged_bpf_disabled") != "0", "EPERM"},
		{"userfaultfd", readSysctl("vm/unprivileged_userfaultfd") == "0", "EPERM"},
		{"swapon", true, "EPERM"},
		{"acct", true, "EPERM"},
		{"socket AF_PACKET SOCK_RAW", true, "EPERM"},
		{"socket AF_INET SOCK_RAW", true, "EPERM"},
		{"symlink /etc/shadow", true, "EACCES"},
		{"symlink /root", !canReadAsOther("/root"), ""},
		{"symlink /proc/1/root", true, ""},
		{"hardlink /etc/passwd", readSysctl("fs/protected_hardlinks") == "1", "EPERM"},
		{"write-system /etc/soda-planted", true, "EACCES"},
		{"cgroup-escape root", cgroup2Root() != "", ""},
		{"net-routes", true, ""},
		{"offhost-tcp 8.8.8.8:53", true, "ENETUNREACH"},
		{"dns-udp 1.1.1.1:53", true, "ENETUNREACH"},
		{"proxy CONNECT 127.1:80", true, ""},
	}
	for _, tt := range tests {
		if !tt.when {
			continue
		}
		r, ok := rows[tt.name]
		switch {
		case !ok:
			t.Errorf("no row %q", tt.name)
		case r.Skipped || !r.Blocked || tt.wantErrno != "" && r.Errno != tt.wantErrno:
			t.Errorf("%s: got blocked=%v skipped=%v errno %q (%s); want blocked with %q",
				tt.name, r.Blocked, r.Skipped, r.Errno, r.Detail, tt.wantErrno)
		}
	}
}

// canReadAsOther reports whether a directory is listable by others.
func canReadAsOther(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.Mode().Perm()&0o005 == 0o005
}

// hostIdentity is what names this host, for the row-25 flags.
type hostIdentity struct {
	machineID, bootID, cmdlineSHA, macs string
	cgroupNotRoot, disks                bool
}

// readHostIdentity reads this host's machine-id, boot id, kernel command
// line hash, MAC addresses, and whether its cgroup and disks show; a host
// without a machine-id gets one that /etc/machine-id cannot match.
func readHostIdentity(t *testing.T) hostIdentity {
	t.Helper()
	var h hostIdentity
	mid, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		t.Skipf("no /etc/machine-id on this host: %v", err)
	}
	h.machineID = strings.TrimSpace(string(mid))
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	h.bootID = strings.TrimSpace(string(boot))
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cmdline)
	h.cmdlineSHA = hex.EncodeToString(sum[:])
	var macs []string
	files, _ := filepath.Glob("/sys/class/net/*/address")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) != "00:00:00:00:00:00" {
			macs = append(macs, strings.TrimSpace(string(b)))
		}
	}
	h.macs = strings.Join(macs, ",")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && parts[2] != "/" {
			h.cgroupNotRoot = true
		}
	}
	disks, _ := os.ReadDir("/sys/block")
	h.disks = len(disks) > 0
	return h
}
