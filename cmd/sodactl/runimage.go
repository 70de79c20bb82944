package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/soda-project/soda/internal/imagestore"
	"github.com/soda-project/soda/internal/sandbox"
)

// runImage resolves --image for a run: a stored image by name or digest,
// else pulled into the store (a tag is resolved, and its digest printed).
// The image is leased until release, so that no prune or rm removes it
// while the sandbox runs; the spec's system is the image's root.
func runImage(ctx context.Context, ro *runOptions, spec *sandbox.Spec, stderr io.Writer) (release func(), err error) {
	if ro.image == "" {
		if ro.imageStore != "" {
			return nil, usagef("sodactl run", "--image-store goes with --image")
		}
		return func() {}, nil
	}
	dir := ro.imageStore
	if dir == "" {
		if dir, err = imagestore.DefaultDir(os.Geteuid(), os.Getenv); err != nil {
			return nil, fmt.Errorf("--image: %w", err)
		}
	}
	s, err := imagestore.Open(ctx, dir, imagestore.Options{})
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	im, err := s.Inspect(ctx, ro.image)
	var nf *imagestore.NotFoundError
	if errors.As(err, &nf) {
		fmt.Fprintf(stderr, "sodactl: image %s is not in %s: pulling it\n", ro.image, dir)
		im, err = s.Pull(ctx, ro.image)
	}
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", ro.image, err)
	}
	if !strings.Contains(ro.image, "@sha256:") && !strings.HasPrefix(ro.image, "sha256:") {
		fmt.Fprintf(stderr, "sodactl: image %s is %s\n", ro.image, im.Digest)
	}
	release, err = s.Lease(ctx, im.Digest)
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", ro.image, err)
	}
	root, err := filepath.EvalSymlinks(im.Rootfs)
	if err != nil {
		release()
		return nil, fmt.Errorf("--image %s: its root %s: %w", ro.image, im.Rootfs, err)
	}
	spec.RootFS = root
	name, _, _ := strings.Cut(ro.image, "@")
	if strings.HasPrefix(ro.image, "sha256:") {
		name = ""
	}
	spec.Image = strings.TrimPrefix(name+"@"+im.Digest, "@")
	spec.Env = append(imageEnv(im.Env), spec.Env...)
	return release, nil
}

// imageEnv is the image's environment as far as a sandbox takes it: not
// PATH or HOME (the sandbox's own are for its layout), the rest filtered
// like --env by the engine.
func imageEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" {
			continue
		}
		out = append(out, kv)
	}
	return out
}
