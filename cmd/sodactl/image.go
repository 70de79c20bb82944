//go:build !soda_lean

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/soda-project/soda/internal/imagestore"
)

const imageUsage = `Usage: sodactl image pull [OPTIONS] REF
       sodactl image import [OPTIONS] PATH
       sodactl image list [OPTIONS]
       sodactl image inspect [OPTIONS] REF|sha256:DIGEST
       sodactl image rm [OPTIONS] REF|sha256:DIGEST...
       sodactl image prune [OPTIONS]

The store of OCI images that sandboxes can run on, each unpacked once
into a root file system shared read-only: /var/lib/soda/images for root,
$XDG_DATA_HOME/soda/images for a user.

Commands:
  pull REF
        Fetch REF (REPO:TAG or REPO@sha256:DIGEST; from a manifest list,
        the host's platform) with the credentials of
        ~/.docker/config.json or $XDG_RUNTIME_DIR/containers/auth.json,
        verify every blob's digest, unpack it and print
        REPO@sha256:DIGEST, the manifest digest a tag resolved to.
        HTTPS only, except to a registry on the loopback address.
  import PATH
        Store the image of an OCI layout directory or a 'docker save'
        archive and print its manifest digest.
  list
        The stored images: manifest digest, platform, size, names.
  inspect REF|sha256:DIGEST
        One image's record as JSON: digest, config, layers, Env,
        WorkingDir, User, names and the unpacked root.
  rm REF|sha256:DIGEST...
        Remove a name (the image goes with its last name), or by
        digest the image and all its names; an image in use is kept.
  prune
        Remove the images without a name (with --all, every image) that
        no sandbox uses, and the blobs no image uses.

Options:
  --store DIR              the image store (default above)
  --platform OS/ARCH       the platform to pick from a manifest list
                           (default linux and the host's architecture)
  --timeout DURATION       bound a pull or import (default 30m)
  --stall-timeout DURATION fail a pull when the registry sends nothing for
                           this long (default 30s)
  --keep-setuid            keep the setuid and setgid bits of the image's
                           files (dropped by default)
  --json                   list: JSON lines instead of a table
  --all                    prune: named images too
  -h, --help               show this help

Options may come before or after the arguments.
`

// imageOptions are the flags of the image commands.
type imageOptions struct {
	store        string
	platform     string
	timeout      time.Duration
	stallTimeout time.Duration
	keepSetuid   bool
	json         bool
	all          bool
}

func (o *imageOptions) flagSet() *flag.FlagSet {
	fs := newFlagSet("sodactl image")
	fs.StringVar(&o.store, "store", o.store, "the image store")
	fs.StringVar(&o.platform, "platform", o.platform, "the platform to pick")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound a pull or import")
	fs.DurationVar(&o.stallTimeout, "stall-timeout", 30*time.Second, "bound a stalled registry")
	fs.BoolVar(&o.keepSetuid, "keep-setuid", false, "keep setuid and setgid bits")
	fs.BoolVar(&o.json, "json", false, "list as JSON lines")
	fs.BoolVar(&o.all, "all", false, "prune named images too")
	return fs
}

// imageCommand implements "sodactl image COMMAND".
func imageCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("sodactl image", "missing command (pull, import, list, inspect, rm or prune)")
	}
	cmd := args[0]
	switch cmd {
	case "-h", "--help", "-help", "help":
		return &helpRequest{imageUsage}
	case "pull", "import", "list", "inspect", "rm", "prune":
	default:
		return usagef("sodactl image", "unknown command %q (known: pull, import, list, inspect, rm, prune)", cmd)
	}
	var o imageOptions
	pos, err := parseInterspersed(o.flagSet(), args[1:], imageUsage, "sodactl image")
	if err != nil {
		return err
	}
	want := map[string]int{"pull": 1, "import": 1, "list": 0, "inspect": 1, "prune": 0}
	if n, ok := want[cmd]; ok && len(pos) != n {
		return usagef("sodactl image", "image %s takes %d argument(s), got %d", cmd, n, len(pos))
	}
	if cmd == "rm" && len(pos) == 0 {
		return usagef("sodactl image", "image rm: missing REF")
	}
	if o.all && cmd != "prune" {
		return usagef("sodactl image", "--all is for image prune")
	}
	if o.json && cmd != "list" {
		return usagef("sodactl image", "--json is for image list")
	}
	if o.store == "" {
		if o.store, err = imagestore.DefaultDir(os.Geteuid(), os.Getenv); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	opts := imagestore.Options{
		Platform:     o.platform,
		StallTimeout: o.stallTimeout,
		Unpack:       imagestore.UnpackOptions{KeepSetuid: o.keepSetuid},
	}
	if isTerminal(stderr) {
		opts.Progress = progressTo(stderr)
	}
	s, err := imagestore.Open(ctx, o.store, opts)
	if err != nil {
		return err
	}
	switch cmd {
	case "pull":
		im, err := s.Pull(ctx, pos[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s@%s\n", repoOf(pos[0]), im.Digest)
		return err
	case "import":
		im, err := s.Import(ctx, pos[0])
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, im.Digest)
		return err
	case "list":
		ims, err := s.List(ctx)
		if err != nil {
			return err
		}
		return listImages(ims, o.json, stdout)
	case "inspect":
		im, err := s.Inspect(ctx, pos[0])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(imageView(im))
	case "rm":
		var errs []error
		for _, ref := range pos {
			if err := s.Remove(ctx, ref); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(stdout, "removed %s\n", ref)
		}
		return errors.Join(errs...)
	default: // prune
		rep, err := s.Prune(ctx, imagestore.PruneOptions{All: o.all})
		if rep != nil {
			for _, d := range rep.Images {
				fmt.Fprintf(stdout, "removed %s\n", d)
			}
			fmt.Fprintf(stdout, "%d image(s), %d blob(s) removed\n", len(rep.Images), rep.Blobs)
		}
		return err
	}
}

// repoOf is ref without its tag or digest.
func repoOf(ref string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return repo
}

// imageJSON is an image as list --json and inspect print it.
type imageJSON struct {
	*imagestore.Image
	Names  []string `json:"names"`
	Rootfs string   `json:"rootfs"`
	Size   int64    `json:"size"`
}

func imageView(im *imagestore.Image) imageJSON {
	return imageJSON{Image: im, Names: im.Names, Rootfs: im.Rootfs, Size: im.Size()}
}

func listImages(ims []*imagestore.Image, asJSON bool, stdout io.Writer) error {
	if asJSON {
		enc := json.NewEncoder(stdout)
		for _, im := range ims {
			if err := enc.Encode(imageView(im)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIGEST\tPLATFORM\tSIZE\tNAMES")
	for _, im := range ims {
		names := strings.Join(im.Names, ",")
		if names == "" {
			names = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", im.Digest, im.Platform, humanBytes(im.Size()), names)
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fK", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// isTerminal reports whether w is a terminal (progress goes there only).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressTo prints a line per layer fetched and unpacked.
func progressTo(w io.Writer) func(imagestore.Event) {
	short := func(d string) string {
		if len(d) > 19 {
			return d[:19]
		}
		return d
	}
	return func(e imagestore.Event) {
		switch e.Kind {
		case imagestore.EventFetch:
			fmt.Fprintf(w, "fetching layer %d/%d %s (%s)\n", e.Index+1, e.Count, short(e.Digest), humanBytes(e.Size))
		case imagestore.EventUnpack:
			fmt.Fprintf(w, "unpacking layer %d/%d %s\n", e.Index+1, e.Count, short(e.Digest))
		case imagestore.EventStored:
			fmt.Fprintf(w, "stored %s\n", e.Digest)
		}
	}
}
