// Command sodadcall is a test client of sodad (test/e2e TestSodad): it
// creates a sandbox through io.github.soda_project.Soda1 with its own
// stdin, stdout and stderr passed as Unix fds, waits for SandboxExited and
// exits with the sandbox's exit status. On stderr it prints
// "sodadcall: id=ID path=PATH create=DURATION total=DURATION result=R".
//
//	sodadcall [-profile NAME] [-allow HOST:PORT] [-memory BYTES] [-spec-key KEY=uid] [-allow-none] [-tty] [-no-wait] [-no-stdio] [-stdout-fd N] -- COMMAND [ARGS...]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godbus/dbus/v5"
)

const (
	busName = "io.github.soda_project.Soda1"
	path    = dbus.ObjectPath("/io/github/soda_project/Soda1")
	iface   = "io.github.soda_project.Soda1.Manager"
)

func main() { os.Exit(run()) }

func run() int {
	profile := flag.String("profile", "dev", "profile")
	allow := flag.String("allow", "", "one Allow target")
	memory := flag.Uint64("memory", 0, "MemoryMax in bytes")
	claim := flag.String("claim-owner", "", "add spec key owner=u VALUE (an identity claim sodad must refuse)")
	noWait := flag.Bool("no-wait", false, "print the id and exit once created")
	noStdio := flag.Bool("no-stdio", false, "pass no fds: the command's streams are /dev/null")
	allowNone := flag.Bool("allow-none", false, "grant no target at start (spec Allow empty)")
	tty := flag.Bool("tty", false, "open a pty, pass its slave as tty (spec TTY) and copy what the command writes to it to stdout")
	stdoutFd := flag.Int("stdout-fd", 1, "the fd passed as stdout (a wrong one must be refused)")
	flag.Parse()
	start := time.Now()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sodadcall: %v\n", err)
		return 125
	}
	defer conn.Close()
	sigs := make(chan *dbus.Signal, 16)
	conn.Signal(sigs)
	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(path), dbus.WithMatchInterface(iface), dbus.WithMatchMember("SandboxExited")); err != nil {
		fmt.Fprintf(os.Stderr, "sodadcall: match: %v\n", err)
		return 125
	}
	spec := map[string]dbus.Variant{}
	if *allow != "" {
		spec["Allow"] = dbus.MakeVariant([]string{*allow})
	}
	if *allowNone {
		spec["Allow"] = dbus.MakeVariant([]string{})
	}
	if *memory != 0 {
		spec["MemoryMax"] = dbus.MakeVariant(*memory)
	}
	if *claim != "" {
		spec["owner"] = dbus.MakeVariant(*claim)
	}
	fds := map[string]dbus.Variant{"stdin": dbus.MakeVariant(dbus.UnixFD(0)), "stdout": dbus.MakeVariant(dbus.UnixFD(*stdoutFd)), "stderr": dbus.MakeVariant(dbus.UnixFD(2))}
	if *noStdio {
		fds = map[string]dbus.Variant{}
	}
	if *tty {
		master, slave, err := openPty()
		if err != nil {
			fmt.Fprintf(os.Stderr, "sodadcall: pty: %v\n", err)
			return 125
		}
		defer master.Close()
		fds = map[string]dbus.Variant{"tty": dbus.MakeVariant(dbus.UnixFD(slave.Fd()))}
		spec["TTY"] = dbus.MakeVariant(true)
		defer slave.Close()
		go io.Copy(os.Stdout, master)
	}
	var id string
	var obj dbus.ObjectPath
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := conn.Object(busName, path).CallWithContext(ctx, iface+".CreateSandbox", 0, *profile, flag.Args(), spec, fds, map[string]dbus.Variant{})
	if err := call.Store(&id, &obj); err != nil {
		fmt.Fprintf(os.Stderr, "sodadcall: CreateSandbox: %v\n", err)
		if e, ok := err.(dbus.Error); ok {
			fmt.Fprintf(os.Stderr, "sodadcall: error name %s\n", e.Name)
		}
		return 125
	}
	created := time.Since(start)
	fmt.Fprintf(os.Stderr, "sodadcall: created id=%s\n", id)
	if *noWait {
		fmt.Println(id)
		fmt.Fprintf(os.Stderr, "sodadcall: id=%s path=%s create=%s\n", id, obj, created)
		return 0
	}
	for {
		select {
		case s := <-sigs:
			if len(s.Body) == 4 && s.Body[0] == id {
				result, _ := s.Body[2].(string)
				status, _ := s.Body[3].(int32)
				if *tty {
					time.Sleep(200 * time.Millisecond) // the pty's last output
				}
				fmt.Fprintf(os.Stderr, "sodadcall: id=%s path=%s create=%s total=%s result=%s\n", id, obj, created, time.Since(start), result)
				return int(status)
			}
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "sodadcall: %s: no SandboxExited in 60 s\n", id)
			return 125
		}
	}
}
