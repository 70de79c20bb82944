//go:build !soda_lean

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/soda-project/soda/internal/imagestore"
	"github.com/soda-project/soda/internal/sandbox"
)

// runImage resolves --image for a run: a stored image by name or digest,
// else pulled into the store (a tag is resolved, and its digest printed).
// The image is leased until release, so that no prune or rm removes it
// while the sandbox runs; the spec's system is the image's root.
func runImage(ctx context.Context, ro *runOptions, spec *sandbox.Spec, stderr io.Writer) (release func(), err error) {
	return useImage(ctx, "sodactl run", ro.image, ro.imageStore, spec, stderr)
}

// useImage is runImage for command cmd's --image and --image-store.
func useImage(ctx context.Context, cmd, image, store string, spec *sandbox.Spec, stderr io.Writer) (release func(), err error) {
	if image == "" {
		if store != "" {
			return nil, usagef(cmd, "--image-store goes with --image")
		}
		return func() {}, nil
	}
	dir := store
	if dir == "" {
		if dir, err = imagestore.DefaultDir(os.Geteuid(), os.Getenv); err != nil {
			return nil, fmt.Errorf("--image: %w", err)
		}
	}
	s, err := imagestore.Open(ctx, dir, imagestore.Options{})
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	im, root, release, err := s.Use(ctx, image)
	var nf *imagestore.NotFoundError
	if errors.As(err, &nf) {
		fmt.Fprintf(stderr, "sodactl: image %s is not in %s: pulling it\n", image, dir)
		if _, err = s.Pull(ctx, image); err == nil {
			im, root, release, err = s.Use(ctx, image)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", image, err)
	}
	if !strings.Contains(image, "@sha256:") && !strings.HasPrefix(image, "sha256:") {
		fmt.Fprintf(stderr, "sodactl: image %s is %s\n", image, im.Digest)
	}
	name, _, _ := strings.Cut(image, "@")
	if strings.HasPrefix(image, "sha256:") {
		name = ""
	}
	spec.UseImage(root, strings.TrimPrefix(name+"@"+im.Digest, "@"), sandbox.ImageConfig{Env: im.Env, WorkingDir: im.WorkingDir})
	return release, nil
}
