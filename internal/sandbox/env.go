package sandbox

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// dropPrefixes and dropNames are environment variables a caller may not
// pass into a sandbox: loader and interpreter injection, configuration
// that runs code or redirects tools, proxies (the sandbox sets its own)
// and certificate overrides. The list follows arapuca's env filter.
var (
	dropPrefixes = []string{"SODA_", "LD_", "DYLD_", "COR_", "CORECLR_", "DOTNET_", "COMPLUS_"}
	dropNames    = []string{
		"BASH_ENV", "ENV", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "NODE_OPTIONS", "PERL5OPT", "PERL5LIB",
		"ZDOTDIR", "IFS", "PROMPT_COMMAND", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "CLASSPATH",
		"GOFLAGS", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXEC_PATH",
		"GIT_TEMPLATE_DIR", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "OPENSSL_CONF",
		"EDITOR", "VISUAL", "PAGER", "CARGO_HOME", "NO_PROXY", "no_proxy", "CURL_CA_BUNDLE", "SSL_CERT_FILE",
		"SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS",
		"XDG_RUNTIME_DIR", "DISPLAY", "WAYLAND_DISPLAY", "HOME", "PATH", "TMPDIR", "USER", "LOGNAME", "SHELL",
	}
)

// EnvDrop says why a variable was not passed in (key only, never the value).
type EnvDrop struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// FilterEnv returns the entries of env (KEY=VALUE) a sandbox may receive
// and the keys it dropped with the reason.
func FilterEnv(env []string) (kept []string, dropped []EnvDrop) {
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			dropped = append(dropped, EnvDrop{Key: k, Reason: "not KEY=VALUE"})
		case len(k) > 256 || len(v) > 32768:
			dropped = append(dropped, EnvDrop{Key: truncate(k, 64), Reason: "too long"})
		case strings.ContainsAny(k, " \t\n\x00"):
			dropped = append(dropped, EnvDrop{Key: truncate(k, 64), Reason: "invalid name"})
		case slices.ContainsFunc(dropPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }):
			dropped = append(dropped, EnvDrop{Key: k, Reason: "reserved prefix"})
		case slices.Contains(dropNames, k):
			dropped = append(dropped, EnvDrop{Key: k, Reason: "set by the sandbox or can inject code"})
		case strings.HasSuffix(strings.ToUpper(k), "_PROXY"):
			dropped = append(dropped, EnvDrop{Key: k, Reason: "proxies are set by the sandbox"})
		default:
			kept = append(kept, kv)
		}
	}
	return kept, dropped
}

// DefaultPath is a sandbox's PATH unless its Spec.Path says otherwise.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// cleanPath keeps the absolute directories of a PATH, cleaned, each once.
func cleanPath(path string) string {
	var out []string
	for _, d := range strings.Split(path, ":") {
		if !strings.HasPrefix(d, "/") || strings.ContainsAny(d, "\x00\n") {
			continue
		}
		if d = filepath.Clean(d); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return strings.Join(out, ":")
}

// baseEnv is the environment every sandboxed command starts with.
func baseEnv(s *Spec) []string {
	env := []string{
		"HOME=" + SandboxHome,
		"USER=agent",
		"LOGNAME=agent",
		"PATH=" + cmp.Or(s.Path, DefaultPath),
		"TMPDIR=/tmp",
		"LANG=C.UTF-8",
		"SHELL=/bin/sh",
		"SODA_SANDBOX_ID=" + s.ID,
		"GIT_TEMPLATE_DIR=" + wire.GitTemplateDir, // empty: git init makes no hooks (sandboxinit/repoguard_linux.go)
	}
	return append(env, netEnv(s)...)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
