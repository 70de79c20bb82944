// Command sodad is soda's supervisor: a system service, activated from the
// system bus as io.github.soda_project.Soda1, that owns every sandbox of the
// host behind polkit. See sodad(8) and docs/dbus-api.md.
package main

import (
	"context"
	"os"

	"github.com/soda-project/soda/internal/sodad"
)

func main() { os.Exit(sodad.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) }
