//go:build soda_lean

package main

import (
	"context"
	"io"

	"github.com/soda-project/soda/internal/sandbox"
)

// leanBuild: this is the lean sodactl (see handoff.go).
const leanBuild = true

// The commands the lean sodactl leaves to the full one; each is the full
// build's function of the same name (image.go, top.go, validate.go,
// sessions.go, runimage.go), which the lean build does not link.

func imageCommand([]string, io.Writer, io.Writer) error { return &handOff{what: "sodactl image"} }

func topCommand(*options, []string, io.Writer) error { return &handOff{what: "sodactl top"} }

func validateCommand(*options, []string, io.Writer, io.Writer) error {
	return &handOff{what: "sodactl validate"}
}

func sandboxMCPCommand([]string, io.Reader, io.Writer, io.Writer) error {
	return &handOff{what: "sodactl sandbox mcp"}
}

// runImage is never reached with --image in the lean build: runCommand
// hands such a run off first (runOptions.fullOnly).
func runImage(_ context.Context, ro *runOptions, _ *sandbox.Spec, _ io.Writer) (func(), error) {
	if ro.image != "" || ro.imageStore != "" {
		return nil, &handOff{what: "sodactl run --image", run: true}
	}
	return func() {}, nil
}
