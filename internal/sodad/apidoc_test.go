package sodad

import (
	"encoding/xml"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5/introspect"
)

// TestIntrospectionMatchesReference checks the introspection sodad serves
// against docs/dbus-api.md, the API's reference: every method with its
// arguments' types in order, every signal, every property with its type.
func TestIntrospectionMatchesReference(t *testing.T) {
	doc, err := os.ReadFile("../../docs/dbus-api.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```\ninterface (\\S+) \\{(.*?)\n\\};\n```").FindAllSubmatch(doc, -1)
	if len(blocks) != 2 {
		t.Fatalf("found %d interface blocks in docs/dbus-api.md, want 2", len(blocks))
	}
	ifaces := map[string]introspect.Interface{}
	for _, x := range []string{node(managerXML, nil), node(sandboxXML, nil)} {
		var n introspect.Node
		if err := xml.Unmarshal([]byte(x), &n); err != nil {
			t.Fatal(err)
		}
		for _, i := range n.Interfaces {
			ifaces[i.Name] = i
		}
	}
	methodRe := regexp.MustCompile(`(?s)(\w+)\(((?:[^()]|\([^()]*\))*)\);`)
	argRe := regexp.MustCompile(`(in|out)?\s*(\S+)\s+\w+`)
	propRe := regexp.MustCompile(`readonly (\S+) (\w+);`)
	for _, b := range blocks {
		name, body := string(b[1]), string(b[2])
		got, ok := ifaces[name]
		if !ok {
			t.Errorf("sodad does not serve interface %s", name)
			continue
		}
		sigs, props, _ := strings.Cut(body, "properties:")
		methods, signals, _ := strings.Cut(sigs, "signals:")
		ms := methodRe.FindAllStringSubmatch(methods, -1)
		if len(ms) != len(got.Methods) {
			t.Errorf("%s: the reference has %d methods, sodad serves %d", name, len(ms), len(got.Methods))
		}
		for _, m := range ms {
			var want []string
			for _, a := range strings.Split(m[2], ",") {
				a = regexp.MustCompile(`#.*`).ReplaceAllString(a, "")
				if p := argRe.FindStringSubmatch(strings.TrimSpace(a)); p != nil {
					want = append(want, p[1]+" "+p[2])
				}
			}
			var have []string
			found := false
			for _, gm := range got.Methods {
				if gm.Name == m[1] {
					found = true
					for _, a := range gm.Args {
						have = append(have, a.Direction+" "+a.Type)
					}
				}
			}
			if !found {
				t.Errorf("%s.%s: in the reference, not served", name, m[1])
			} else if strings.Join(have, ",") != strings.Join(want, ",") {
				t.Errorf("%s.%s: serves %v, the reference says %v", name, m[1], have, want)
			}
		}
		for _, s := range methodRe.FindAllStringSubmatch(signals, -1) {
			found := false
			for _, gs := range got.Signals {
				found = found || gs.Name == s[1]
			}
			if !found {
				t.Errorf("signal %s.%s: in the reference, not served", name, s[1])
			}
		}
		for _, p := range propRe.FindAllStringSubmatch(props, -1) {
			found := false
			for _, gp := range got.Properties {
				if gp.Name == p[2] {
					found = true
					if gp.Type != p[1] {
						t.Errorf("property %s.%s: type %s, the reference says %s", name, p[2], gp.Type, p[1])
					}
				}
			}
			if !found {
				t.Errorf("property %s.%s: in the reference, not served", name, p[2])
			}
		}
	}
}
