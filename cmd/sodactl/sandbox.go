package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox"
	"github.com/soda-project/soda/internal/sodadclient"
)

const sandboxUsage = `Usage: sodactl sandbox list [--json]
       sodactl sandbox status [--json] ID
       sodactl sandbox kill [--signal SIG] ID
       sodactl sandbox grant [--private] ID TARGET
       sodactl sandbox revoke ID TARGET
       sodactl sandbox audit [--follow] ID
       sodactl sandbox profiles [--json]
       sodactl sandbox mcp --direct [OPTIONS]   (see sodactl sandbox mcp --help)

Operate the sandboxes of sodad, soda's supervisor, over the system bus
(its D-Bus API, io.github.soda_project.Soda1). You see and act on your own
sandboxes; another user's need polkit's manage-other (root has it).

Commands:
  list          the sandboxes you may see: id, owner, profile, state
  status ID     one sandbox: unit, state, exit status, grants, limits
  kill ID       send a signal to its command (default TERM; KILL ends the
                whole sandbox)
  grant ID TARGET
                add TARGET (HOST:PORT, or mcp:NAME) to its allow-list; new
                connections see it at once. Beyond its profile polkit asks
                for an administrator.
  revoke ID TARGET
                remove TARGET: new connections to it are refused
  audit ID      print its audit records (JSON lines, as sodactl run
                --audit-json writes them); --follow keeps printing until
                the sandbox has exited
  profiles      the profiles you may create sandboxes from

Options:
  --json            machine-readable output (list, status, profiles)
  --signal SIG      signal name or number (kill; default TERM)
  --private         grant a target that may resolve to a private address
                    (grant)
  --follow          follow the audit while the sandbox runs (audit)
  -h, --help        show this help

On a terminal polkit may ask for a password; elsewhere an action that
needs one fails with a message saying so.
`

// sandboxOptions holds the options of the sodad commands of "sodactl
// sandbox" (list, status, kill, grant, revoke, audit, profiles).
type sandboxOptions struct {
	asJSON, private, follow bool
	signal                  string
}

// flagSet returns the flags of those commands, bound to so.
func (so *sandboxOptions) flagSet() *flag.FlagSet {
	fs := newFlagSet("sodactl sandbox")
	fs.BoolVar(&so.asJSON, "json", false, "")
	fs.BoolVar(&so.private, "private", false, "")
	fs.BoolVar(&so.follow, "follow", false, "")
	fs.StringVar(&so.signal, "signal", "TERM", "")
	return fs
}

// sandboxCommand implements "sodactl sandbox".
func sandboxCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "mcp" {
		return sandboxMCPCommand(args[1:], os.Stdin, stdout, stderr)
	}
	var so sandboxOptions
	fs := so.flagSet()
	pos, err := parseInterspersed(fs, args, sandboxUsage, "sodactl sandbox")
	if err != nil {
		return err
	}
	asJSON, private, follow, sig := so.asJSON, so.private, so.follow, so.signal
	if len(pos) == 0 {
		return usagef("sodactl sandbox", "missing command (list, status, kill, grant, revoke, audit or profiles)")
	}
	cmd, pos := pos[0], pos[1:]
	want := map[string]int{"list": 0, "profiles": 0, "status": 1, "kill": 1, "audit": 1, "grant": 2, "revoke": 2, "help": 0}
	n, ok := want[cmd]
	if !ok {
		return usagef("sodactl sandbox", "unknown command %q (known: list, status, kill, grant, revoke, audit, profiles)", cmd)
	}
	if cmd == "help" {
		return &helpRequest{sandboxUsage}
	}
	if len(pos) != n {
		return usagef("sodactl sandbox", "%s takes %d argument(s), got %d", cmd, n, len(pos))
	}
	flagsFor := map[string][]string{"json": {"list", "status", "profiles"}, "private": {"grant"}, "follow": {"audit"}, "signal": {"kill"}}
	var bad error
	fs.Visit(func(f *flag.Flag) {
		if !slices.Contains(flagsFor[f.Name], cmd) && bad == nil {
			bad = usagef("sodactl sandbox", "--%s does not apply to %s", f.Name, cmd)
		}
	})
	if bad != nil {
		return bad
	}
	signum := 0
	if cmd == "kill" {
		if signum, err = parseSignal(sig); err != nil {
			return usagef("sodactl sandbox", "--signal: %v", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, err := sodadclient.Connect(ctx)
	if err != nil {
		return fmt.Errorf("%w (sodactl sandbox operates sodad's sandboxes, over the system bus; sandboxes of sodactl run --direct are not sodad's)", err)
	}
	defer c.Close()
	interactive := sandbox.IsTerminal(os.Stdin)
	switch cmd {
	case "list":
		l, err := c.List(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, l)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tOWNER\tPROFILE\tSTATE")
		for _, e := range l {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.ID, userName(e.OwnerUID), e.Profile, e.State)
		}
		return tw.Flush()
	case "profiles":
		ps, err := c.ListProfiles(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, ps)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PROFILE\tDESCRIPTION")
		for _, p := range ps {
			fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Description)
		}
		return tw.Flush()
	}
	sb, err := c.Open(ctx, pos[0])
	if err != nil {
		return err
	}
	switch cmd {
	case "status":
		p, err := sb.Properties(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(stdout, p)
		}
		return writeStatus(stdout, p)
	case "kill":
		return sb.Kill(ctx, int32(signum), interactive)
	case "grant":
		return sb.Grant(ctx, pos[1], private, interactive)
	case "revoke":
		return sb.Revoke(ctx, pos[1], interactive)
	default: // audit
		err := sb.FollowAudit(ctx, 0, follow, func(r string) error {
			_, err := fmt.Fprintln(stdout, r)
			return err
		})
		if ctx.Err() != nil {
			return nil // interrupted while following
		}
		return err
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func userName(uid uint32) string {
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		return u.Username
	}
	return s
}

func writeStatus(w io.Writer, p sodadclient.Properties) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	list := func(l []string) string {
		if len(l) == 0 {
			return "-"
		}
		return strings.Join(l, " ")
	}
	state := p.State
	if p.Exited() {
		state += fmt.Sprintf(" (%s, status %d)", p.Result, p.ExitStatus)
	}
	fmt.Fprintf(tw, "Sandbox:\t%s\n", p.ID)
	fmt.Fprintf(tw, "Owner:\t%s (uid %d)\n", userName(p.OwnerUID), p.OwnerUID)
	fmt.Fprintf(tw, "Profile:\t%s\n", p.Profile)
	fmt.Fprintf(tw, "Unit:\t%s\n", p.Unit)
	fmt.Fprintf(tw, "State:\t%s\n", state)
	if p.Image != "" {
		fmt.Fprintf(tw, "Image:\t%s\n", p.Image)
	}
	if !p.Created.IsZero() {
		fmt.Fprintf(tw, "Created:\t%s\n", p.Created.Format(time.RFC3339))
	}
	if !p.ExitedAt.IsZero() {
		fmt.Fprintf(tw, "Exited:\t%s\n", p.ExitedAt.Format(time.RFC3339))
	}
	if p.NoNetwork {
		fmt.Fprintf(tw, "Network:\tnone\n")
	} else {
		fmt.Fprintf(tw, "MCP:\t%s\n", list(p.MCP))
		fmt.Fprintf(tw, "Allow:\t%s\n", list(p.Allow))
		fmt.Fprintf(tw, "AllowPrivate:\t%s\n", list(p.AllowPrivate))
		if len(p.Keys) > 0 {
			fmt.Fprintf(tw, "Keys:\t%s\n", strings.Join(p.Keys, "; "))
			t := p.ModelTokens
			fmt.Fprintf(tw, "Model tokens:\t%d input, %d output, %d cache read, %d cache write\n", t["input"], t["output"], t["cache_read"], t["cache_write"])
		}
	}
	fmt.Fprintf(tw, "ReadWrite:\t%s\n", list(p.ReadWritePaths))
	fmt.Fprintf(tw, "ReadOnly:\t%s\n", list(p.ReadOnlyPaths))
	var lims []string
	for _, k := range []string{"MemoryMax", "TasksMax", "CPUQuotaPercent", "CPUWeight", "TimeoutUSec", "TmpSize", "HomeSize"} {
		if v := p.Limits[k]; v != 0 {
			lims = append(lims, fmt.Sprintf("%s=%d", k, v))
		}
	}
	fmt.Fprintf(tw, "Limits:\t%s\n", list(lims))
	return tw.Flush()
}

// parseSignal takes TERM, SIGTERM or 15.
func parseSignal(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 64 {
			return 0, fmt.Errorf("signal %d is not 1 to 64", n)
		}
		return n, nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if n := unix.SignalNum(name); n != 0 {
		return int(n), nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}
