// Command probe is the one program of the test images of test/images,
// test/validate and internal/sandbox's TestRootFS. Without arguments it
// says what the sandbox's root holds. With files as arguments it is a
// validator: each file must hold "ok", else it prints a gcc-style
// diagnostic; it exits 1 if one does not, 0 otherwise. Called as tar,
// it does what a validator's sandbox asks of tar to write the sources in
// (tar -x -f - -C DIR: regular files and directories only), for an image
// that has no tar of its own. Called as true, it exits 0 (the start-up
// benchmark's command). It prints its working directory and some of its
// environment too (an image's configuration applied).
package main

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	switch filepath.Base(os.Args[0]) {
	case "true":
		return
	case "tar":
		os.Exit(untar(os.Args[1:]))
	}
	if len(os.Args) > 1 {
		os.Exit(validate(os.Args[1:]))
	}
	b, err := os.ReadFile("/etc/os-release")
	fmt.Printf("os-release: %q %v\n", b, err)
	for _, p := range []string{"/usr/bin/env", "/bin/sh", "/usr/lib/os-release"} {
		_, err := os.Stat(p)
		fmt.Printf("stat %s: %v\n", p, err == nil)
	}
	err = os.WriteFile("/bin/written", []byte("x"), 0o644)
	fmt.Printf("write /bin/written: %v\n", err == nil)
	err = os.WriteFile(os.Getenv("HOME")+"/ok", []byte("x"), 0o644)
	fmt.Printf("write home: %v\n", err == nil)
	wd, _ := os.Getwd()
	fmt.Printf("cwd: %s\nPATH: %s\nIMAGE_VAR: %s\nHOME: %s\n", wd, os.Getenv("PATH"), os.Getenv("IMAGE_VAR"), os.Getenv("HOME"))
}

func validate(files []string) int {
	code := 0
	for _, f := range files {
		if f == "--" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), "ok") {
			fmt.Printf("%s:1:1: error: not ok\n", f)
			code = 1
		}
	}
	return code
}

// untar extracts standard input into the directory after -C.
func untar(args []string) int {
	dir := "."
	for i, a := range args {
		if a == "-C" && i+1 < len(args) {
			dir = args[i+1]
		}
	}
	tr := tar.NewReader(os.Stdin)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return 0
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "tar:", err)
			return 2
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			fmt.Fprintln(os.Stderr, "tar: refused", h.Name)
			return 2
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			var f *os.File
			if f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_EXCL, 0o644); err == nil {
				_, err = io.Copy(f, tr)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "tar:", err)
			return 2
		}
	}
}
