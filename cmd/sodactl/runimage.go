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
	im, err := s.Inspect(ctx, image)
	var nf *imagestore.NotFoundError
	if errors.As(err, &nf) {
		fmt.Fprintf(stderr, "sodactl: image %s is not in %s: pulling it\n", image, dir)
		im, err = s.Pull(ctx, image)
	}
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", image, err)
	}
	if !strings.Contains(image, "@sha256:") && !strings.HasPrefix(image, "sha256:") {
		fmt.Fprintf(stderr, "sodactl: image %s is %s\n", image, im.Digest)
	}
	release, err = s.Lease(ctx, im.Digest)
	if err != nil {
		return nil, fmt.Errorf("--image %s: %w", image, err)
	}
	root, err := filepath.EvalSymlinks(im.Rootfs)
	if err != nil {
		release()
		return nil, fmt.Errorf("--image %s: its root %s: %w", image, im.Rootfs, err)
	}
	spec.RootFS = root
	name, _, _ := strings.Cut(image, "@")
	if strings.HasPrefix(image, "sha256:") {
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
