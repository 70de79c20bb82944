package llmgateway

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Provider is a model API the gateway can stand in for.
type Provider struct {
	// Name is the provider's name on the command line and the first
	// element of the gateway's paths.
	Name string
	// Upstream is the provider's API (scheme and host, and the path its
	// clients' base URL ends in).
	Upstream string
	// KeyEnv is the variable the provider's clients read the key from:
	// the host's real key is taken from it, the sandbox gets the
	// placeholder in it.
	KeyEnv string
	// MoreKeyEnv are more variables the sandbox gets the placeholder in,
	// for clients that read the key from elsewhere: Codex's exec (0.169)
	// reads CODEX_API_KEY, not OPENAI_API_KEY.
	MoreKeyEnv []string
	// BaseURLEnv is the variable that points the provider's clients at
	// another base URL; BaseURLSuffix is what follows the gateway's
	// /NAME in it (OpenAI's clients expect a base URL ending in /v1).
	BaseURLEnv, BaseURLSuffix string
	// Bearer says the key travels as "Authorization: Bearer KEY"; else it
	// is Anthropic's x-api-key header (Claude Code sends a bearer token
	// instead when it is given ANTHROPIC_AUTH_TOKEN: both are checked).
	Bearer bool
	// placeholderPrefix starts the placeholder, so that clients that
	// look at a key's shape accept it.
	placeholderPrefix string
}

// providers are the providers the gateway knows, by name. Vertex AI and
// Bedrock are not among them: their clients sign requests (Google ADC,
// SigV4) in ways the gateway would have to redo, which it does not yet.
var providers = []Provider{
	{Name: "anthropic", Upstream: "https://api.anthropic.com", KeyEnv: "ANTHROPIC_API_KEY",
		BaseURLEnv: "ANTHROPIC_BASE_URL", placeholderPrefix: "sk-ant-soda-"},
	{Name: "openai", Upstream: "https://api.openai.com/v1", KeyEnv: "OPENAI_API_KEY", MoreKeyEnv: []string{"CODEX_API_KEY"},
		BaseURLEnv: "OPENAI_BASE_URL", BaseURLSuffix: "/v1", Bearer: true, placeholderPrefix: "sk-soda-"},
	{Name: "openrouter", Upstream: "https://openrouter.ai/api/v1", KeyEnv: "OPENROUTER_API_KEY",
		BaseURLEnv: "OPENROUTER_BASE_URL", BaseURLSuffix: "/v1", Bearer: true, placeholderPrefix: "sk-or-soda-"},
}

// Providers returns the names of the providers the gateway knows.
func Providers() []string {
	names := make([]string, len(providers))
	for i, p := range providers {
		names[i] = p.Name
	}
	return names
}

// Lookup returns the provider called name.
func Lookup(name string) (Provider, error) {
	i := slices.IndexFunc(providers, func(p Provider) bool { return p.Name == name })
	if i < 0 {
		return Provider{}, fmt.Errorf("unknown model provider %q (known: %s)", name, strings.Join(Providers(), ", "))
	}
	return providers[i], nil
}

// ParseUpstream checks an upstream URL given for a provider (--llm
// NAME=URL): https, or plain http on the loopback address only (a test
// server or a local gateway), no user information, query or fragment.
func ParseUpstream(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", s, err)
	}
	switch {
	case u.Host == "":
		return nil, fmt.Errorf("upstream %q: want https://HOST[:PORT][/PATH]", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("upstream %q: no user, query or fragment", s)
	case u.Scheme == "https":
	case u.Scheme == "http" && isLoopback(u.Hostname()):
	case u.Scheme == "http":
		return nil, fmt.Errorf("upstream %q: plain http only to the loopback address; use https", s)
	default:
		return nil, fmt.Errorf("upstream %q: scheme %q: want https", s, u.Scheme)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}
