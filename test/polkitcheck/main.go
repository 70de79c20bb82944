// Command polkitcheck is a test fixture of internal/polkit (test/e2e's
// TestPolkit): it owns sodad's bus name on the system bus and exports one
// method, Check(s action, b interactive) -> (b authorized, b challenge), that
// asks polkit, through internal/polkit, about the method's caller, the way
// sodad does. It prints "ready NAME" once it owns the name and ends when its
// stdin closes.
//
//	polkitcheck [-name BUS-NAME]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/soda-project/soda/internal/polkit"
)

const (
	objectPath = dbus.ObjectPath("/io/github/soda_project/Soda1")
	iface      = "io.github.soda_project.Soda1.Test"
)

type checker struct {
	auth polkit.Authorizer
}

// Check asks polkit whether the caller (the bus's sender, not an argument)
// may perform action.
func (c *checker) Check(sender dbus.Sender, action string, interactive bool) (bool, bool, *dbus.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	r, err := c.auth.CheckAuthorization(ctx, polkit.Check{
		Sender: string(sender), Action: action, Interactive: interactive,
		Details: map[string]string{"profile": "dev"},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "polkitcheck: %v\n", err)
		return false, false, dbus.MakeFailedError(err)
	}
	fmt.Fprintf(os.Stderr, "polkitcheck: %s for %s: authorized=%v challenge=%v details=%v took=%s\n", action, sender, r.Authorized, r.Challenge, r.Details, time.Since(start).Round(time.Microsecond))
	return r.Authorized, r.Challenge, nil
}

func main() {
	name := flag.String("name", "io.github.soda_project.Soda1", "bus name to own")
	flag.Parse()
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		fmt.Fprintf(os.Stderr, "polkitcheck: system bus: %v\n", err)
		os.Exit(1)
	}
	defer conn.Close()
	if err := conn.Export(&checker{auth: polkit.New(conn)}, objectPath, iface); err != nil {
		fmt.Fprintf(os.Stderr, "polkitcheck: export: %v\n", err)
		os.Exit(1)
	}
	reply, err := conn.RequestName(*name, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		fmt.Fprintf(os.Stderr, "polkitcheck: own %s: reply %v, %v\n", *name, reply, err)
		os.Exit(1)
	}
	fmt.Printf("ready %s\n", *name)
	io.Copy(io.Discard, bufio.NewReader(os.Stdin))
}
