package agentmcp

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Lookup returns an environment variable's value and whether it is set
// (os.LookupEnv).
type Lookup func(name string) (string, bool)

var (
	claudeVar   = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`) // ${VAR}, ${VAR:-default}
	vscodeVar   = regexp.MustCompile(`\$\{(env|input|command):([^}]*)\}`)          // ${env:VAR}
	openCodeVar = regexp.MustCompile(`\{(env|file):([^}]*)\}`)                     // {env:VAR}
)

// Expand replaces the variable references of c's format in each server's
// command, arguments, environment, URL and headers, as the agent would
// when it reads the file: Claude Code's ${VAR} and ${VAR:-default} (an
// unset VAR without a default is an error, as in Claude Code), VS Code's
// ${env:VAR}, OpenCode's {env:VAR} (empty when unset). What cannot be
// expanded outside the agent (VS Code's ${input:ID}, OpenCode's
// {file:PATH}) is an error naming it. Codex's env_vars were read by Parse
// and take their values here. Codex expands nothing else.
func (c *Config) Expand(lookup Lookup) error {
	for i := range c.Servers {
		s := &c.Servers[i]
		var err error
		expand := func(v string) string {
			out, e := c.expandOne(v, lookup)
			if e != nil && err == nil {
				err = fmt.Errorf("server %s: %w", s.Name, e)
			}
			return out
		}
		s.Command, s.URL = expand(s.Command), expand(s.URL)
		for j := range s.Args {
			s.Args[j] = expand(s.Args[j])
		}
		for _, m := range []map[string]string{s.Env, s.Headers} {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				m[k] = expand(m[k])
			}
		}
		for _, name := range s.EnvVars {
			if v, ok := lookup(name); ok {
				if s.Env == nil {
					s.Env = map[string]string{}
				}
				s.Env[name] = v
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) expandOne(v string, lookup Lookup) (string, error) {
	var err error
	fail := func(e error) {
		if err == nil {
			err = e
		}
	}
	switch c.Format {
	case FormatClaude:
		v = claudeVar.ReplaceAllStringFunc(v, func(ref string) string {
			m := claudeVar.FindStringSubmatch(ref)
			if val, ok := lookup(m[1]); ok {
				return val
			}
			if m[2] != "" {
				return m[3]
			}
			fail(fmt.Errorf("${%s} is not set and has no default (${%s:-DEFAULT})", m[1], m[1]))
			return ref
		})
	case FormatVSCode:
		v = vscodeVar.ReplaceAllStringFunc(v, func(ref string) string {
			m := vscodeVar.FindStringSubmatch(ref)
			if m[1] != "env" {
				fail(fmt.Errorf("%s: VS Code asks for it when it starts the server; put the value in the file or in an environment variable (${env:NAME})", ref))
				return ref
			}
			val, _ := lookup(m[2])
			return val
		})
	case FormatOpenCode:
		v = openCodeVar.ReplaceAllStringFunc(v, func(ref string) string {
			m := openCodeVar.FindStringSubmatch(ref)
			if m[1] != "env" {
				fail(fmt.Errorf("%s is not supported: use {env:NAME}", ref))
				return ref
			}
			val, _ := lookup(strings.TrimSpace(m[2]))
			return val
		})
	}
	return v, err
}
