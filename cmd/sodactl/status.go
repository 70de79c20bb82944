package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/soda-project/soda/internal/runstate"
	"github.com/soda-project/soda/internal/serverconf"
	"github.com/soda-project/soda/internal/systemd"
)

// serverView is one server as list and status show it: configured, or
// only running (a soda-mcpd started by hand, found by its runtime record).
type serverView struct {
	Name, Config, Listen, Socket, Service, Status string
	Runtime                                       *runstate.Record
	RuntimePath                                   string
	ConfigErr                                     error
}

func collect(ctx context.Context, opts *options, names []string) []serverView {
	var views []serverView
	var units []string
	for _, n := range names {
		v := serverView{Name: n, Socket: "-", Service: "-"}
		path := serverconf.PathFor(opts.configDir, n)
		cfg, err := serverconf.Load(path)
		switch {
		case err == nil:
			v.Config, v.Listen = path, cfg.Bridge.Listen
		case errors.Is(err, fs.ErrNotExist):
			// Not configured: it may run all the same, started by hand.
		default:
			v.Config, v.ConfigErr = path, err
		}
		// Lookup only returns the record of a live process, so a file left
		// by a killed instance is not shown.
		if rec, p, err := runstate.Lookup(n, opts.searchDirs()); err == nil {
			v.Runtime, v.RuntimePath = &rec, p
			if v.Config == "" && len(rec.Listen) > 0 {
				v.Listen = rec.Listen[0]
			}
		}
		views = append(views, v)
		units = append(units, "soda-mcp@"+n+".socket", "soda-mcp@"+n+".service")
	}
	states, err := systemd.UnitStates(ctx, units)
	for i := range views {
		v := &views[i]
		if err != nil {
			v.Socket, v.Service = "no systemd", "no systemd"
		} else {
			v.Socket = states["soda-mcp@"+v.Name+".socket"].Active
			svc := states["soda-mcp@"+v.Name+".service"]
			v.Service, v.Status = svc.Active, svc.Status
		}
		if v.Runtime != nil && !v.Runtime.SocketActivated && !strings.HasPrefix(v.Service, "active") {
			v.Service = fmt.Sprintf("foreground pid %d", v.Runtime.PID)
		}
	}
	return views
}

// runningNames are the names of the live runtime records in dirs.
func runningNames(dirs []string) []string {
	var names []string
	for _, d := range dirs {
		paths, _ := filepath.Glob(filepath.Join(d, "*.status.json"))
		for _, p := range paths {
			n := strings.TrimSuffix(filepath.Base(p), ".status.json")
			if serverconf.ValidName(n) != nil {
				continue
			}
			if _, _, err := runstate.Lookup(n, []string{d}); err == nil {
				names = append(names, n)
			}
		}
	}
	return names
}

func configuredNames(dir string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".conf"))
	}
	return names, nil
}

func mcpList(opts *options, args []string, stdout io.Writer) error {
	const cmd = "sodactl mcp list"
	fset := sharedFlags(opts, cmd)
	pos, err := parseInterspersed(fset, args, mcpUsage, cmd)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected arguments: %s", strings.Join(pos, " "))
	}
	names, err := configuredNames(opts.configDir)
	if err != nil {
		return err
	}
	for _, n := range runningNames(opts.searchDirs()) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		fmt.Fprintf(stdout, "no MCP servers configured in %s (see soda.conf(5)) or running\n", opts.configDir)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLISTEN\tSOCKET\tSERVICE\tSESSIONS\tCHILDREN")
	for _, v := range collect(ctx, opts, names) {
		listen := v.Listen
		if v.ConfigErr != nil {
			listen = "invalid config"
		}
		sessions, children := "-", "-"
		if v.Runtime != nil {
			sessions, children = fmt.Sprint(v.Runtime.Sessions), fmt.Sprint(v.Runtime.Children)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, listen, v.Socket, v.Service, sessions, children)
	}
	return tw.Flush()
}

func mcpStatus(opts *options, args []string, stdout io.Writer) error {
	name, err := parseName(opts, args, "sodactl mcp status")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v := collect(ctx, opts, []string{name})[0]
	if v.Config == "" && v.Runtime == nil {
		_, err := opts.resolver().Resolve(name)
		return err
	}
	fmt.Fprintf(stdout, "soda-mcp@%s\n", v.Name)
	switch {
	case v.ConfigErr != nil:
		fmt.Fprintf(stdout, "  config:   INVALID: %v\n", v.ConfigErr)
	case v.Config != "":
		fmt.Fprintf(stdout, "  config:   %s\n  url:      http://%s/mcp\n", v.Config, v.Listen)
	default:
		fmt.Fprintf(stdout, "  config:   none (started by hand; %s)\n", v.RuntimePath)
		if v.Listen != "" {
			fmt.Fprintf(stdout, "  url:      http://%s/mcp\n", v.Listen)
		}
	}
	fmt.Fprintf(stdout, "  socket:   %s\n  service:  %s\n", v.Socket, v.Service)
	if v.Status != "" {
		fmt.Fprintf(stdout, "  status:   %s\n", v.Status)
	}
	if r := v.Runtime; r != nil {
		if r.TokenFile != "" {
			fmt.Fprintf(stdout, "  token:    %s\n", r.TokenFile)
		}
		fmt.Fprintf(stdout, "  pid:      %d\n  sessions: %d\n  children: %d\n  calls:    %d in the last minute\n", r.PID, r.Sessions, r.Children, r.CallsPerMinute)
	}
	return nil
}
