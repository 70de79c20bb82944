package generator

import (
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/soda-project/soda/internal/serverconf"
)

// validateInstances reads the validation workers' kinds in dir: those
// with [Listener] Listen= become soda-validate@KIND.socket instances. Only
// that key is read here (soda-validated checks the rest when it starts);
// the generator stays small.
func validateInstances(dir string, logf Logger) ([]instance, []string) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.conf"))
	sort.Strings(paths)
	var out []instance
	var skipped []string
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".conf")
		if err := serverconf.ValidName(name); err != nil {
			logf("skipping %s: %v", p, err)
			skipped = append(skipped, filepath.Base(p))
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			logf("skipping %s: %v", p, err)
			skipped = append(skipped, name)
			continue
		}
		opts, err := serverconf.ParseOptions(p, data)
		if err != nil {
			logf("skipping %s: %v", p, err)
			skipped = append(skipped, name)
			continue
		}
		listen := ""
		for _, o := range opts {
			if o.Key() == "Listener.Listen" {
				listen = o.Value
			}
		}
		if listen == "" {
			continue // stdio only
		}
		if err := serverconf.CheckLoopback(listen); err != nil {
			logf("skipping %s: Listen=%s: %v", p, listen, err)
			skipped = append(skipped, name)
			continue
		}
		_, port, err := net.SplitHostPort(listen)
		if err != nil || port == "0" {
			logf("skipping %s: Listen=%s: a socket unit needs a fixed port", p, listen)
			skipped = append(skipped, name)
			continue
		}
		out = append(out, instance{name: name, path: p, port: port, unit: "soda-validate@" + name + ".socket",
			cfg: serverconf.Server{Bridge: serverconf.Bridge{Listen: listen}}})
	}
	return out, skipped
}
