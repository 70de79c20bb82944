package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/soda-project/soda/internal/config"
	"github.com/soda-project/soda/internal/mcpd"
	"github.com/soda-project/soda/internal/systemd"
)

// runtimeDir is where soda-mcpd publishes NAME.status.json.
const runtimeDir = "/run/soda/mcp"

// serverView is one configured server as list and status show it.
type serverView struct {
	Name, Listen, Socket, Service, Status string
	Runtime                               *mcpd.RuntimeStatus
	ConfigErr                             error
}

func collect(ctx context.Context, configDir string, names []string) []serverView {
	var views []serverView
	var units []string
	for _, n := range names {
		v := serverView{Name: n, Socket: "-", Service: "-"}
		cfg, err := config.Load(config.PathFor(configDir, n))
		if err != nil {
			v.ConfigErr = err
		} else {
			v.Listen = cfg.Bridge.Listen
		}
		if b, err := os.ReadFile(filepath.Join(runtimeDir, n+".status.json")); err == nil {
			var rs mcpd.RuntimeStatus
			if json.Unmarshal(b, &rs) == nil {
				v.Runtime = &rs
			}
		}
		views = append(views, v)
		units = append(units, "soda-mcp@"+n+".socket", "soda-mcp@"+n+".service")
	}
	states, err := systemd.UnitStates(ctx, units)
	for i := range views {
		if err != nil {
			views[i].Socket, views[i].Service = "no systemd", "no systemd"
			continue
		}
		views[i].Socket = states["soda-mcp@"+views[i].Name+".socket"].Active
		svc := states["soda-mcp@"+views[i].Name+".service"]
		views[i].Service, views[i].Status = svc.Active, svc.Status
		if !strings.HasPrefix(svc.Active, "active") && !strings.HasPrefix(svc.Active, "deactivating") {
			views[i].Runtime = nil // stale file of a stopped service
		}
	}
	return views
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
	fset := newFlagSet(cmd)
	opts.bind(fset)
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
	if len(names) == 0 {
		fmt.Fprintf(stdout, "no MCP servers configured in %s (see soda.conf(5))\n", opts.configDir)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLISTEN\tSOCKET\tSERVICE\tSESSIONS\tCHILDREN")
	for _, v := range collect(ctx, opts.configDir, names) {
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
	if _, err := os.Stat(config.PathFor(opts.configDir, name)); err != nil {
		return fmt.Errorf("no configuration for %q: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v := collect(ctx, opts.configDir, []string{name})[0]
	fmt.Fprintf(stdout, "soda-mcp@%s\n", v.Name)
	if v.ConfigErr != nil {
		fmt.Fprintf(stdout, "  config:   INVALID: %v\n", v.ConfigErr)
	} else {
		fmt.Fprintf(stdout, "  config:   %s\n  url:      http://%s/mcp\n", config.PathFor(opts.configDir, name), v.Listen)
	}
	fmt.Fprintf(stdout, "  socket:   %s\n  service:  %s\n", v.Socket, v.Service)
	if v.Status != "" {
		fmt.Fprintf(stdout, "  status:   %s\n", v.Status)
	}
	if r := v.Runtime; r != nil {
		fmt.Fprintf(stdout, "  pid:      %d\n  sessions: %d\n  children: %d\n  calls:    %d in the last minute\n", r.PID, r.Sessions, r.Children, r.CallsPerMinute)
	}
	return nil
}
