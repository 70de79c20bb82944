// Package token manages the bearer token files that authenticate MCP clients
// to soda-mcpd (by default /var/lib/soda/mcp/NAME.token).
//
// A token file holds exactly 64 lowercase hexadecimal characters (32 random
// bytes), optionally followed by one newline. Ensure creates the file on first
// use; Read only reads it. Files are created with mode 0640 so that the owning
// group (the operators allowed to hand tokens to clients) can read them.
package token

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const (
	// Bytes is the number of random bytes in a token.
	Bytes = 32
	// Len is the length of a token's text: Bytes, hex-encoded.
	Len = 2 * Bytes
	// FileMode is the permission of a token file created by Ensure.
	FileMode fs.FileMode = 0o640
	// DirMode is the permission of a token directory created by Ensure.
	DirMode fs.FileMode = 0o750
)

// ErrMalformed is wrapped by the errors of Read and Ensure when a token file
// exists but does not hold a valid token.
var ErrMalformed = errors.New("malformed token")

// Generate returns a new random token: Bytes bytes from crypto/rand,
// hex-encoded in lowercase.
func Generate() (string, error) {
	b := make([]byte, Bytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Valid reports whether s is a well-formed token: exactly Len lowercase
// hexadecimal characters.
func Valid(s string) bool {
	if len(s) != Len {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Equal reports whether a and b are the same token, in time that does not
// depend on where they differ (only on their lengths).
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Read reads and validates the token file at path. It never creates the
// file: when it is absent the error wraps fs.ErrNotExist.
func Read(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	defer f.Close()
	// A valid file is at most Len+1 bytes; read one more to detect longer ones
	// without slurping an arbitrarily large file.
	data, err := io.ReadAll(io.LimitReader(f, Len+2))
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	return parse(path, data)
}

// parse validates the content of a token file.
func parse(path string, data []byte) (string, error) {
	s := string(data)
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	if !Valid(s) {
		return "", fmt.Errorf("token file %s: %w: want exactly %d lowercase hex characters, "+
			"found %s; delete the file to have a new token generated when the server "+
			"next starts (clients holding the old token must then be reconfigured)",
			path, ErrMalformed, Len, describe(data))
	}
	return s, nil
}

// describe summarises malformed content without printing it.
func describe(data []byte) string {
	switch {
	case len(data) == 0:
		return "an empty file"
	case len(data) > Len+1:
		return fmt.Sprintf("more than %d bytes", Len+1)
	default:
		return fmt.Sprintf("%d bytes", len(data))
	}
}

// Ensure returns the token stored at path, creating the file with a new
// token when it does not exist.
//
// Creation is atomic and race-free: the token is written to a temporary file
// in the same directory, synced, then hard-linked to path, which fails if
// path already exists. When several processes call Ensure at once, exactly one
// creates the file and all of them return its token. A missing parent
// directory is created with DirMode; the file gets FileMode whatever the
// umask.
func Ensure(path string) (string, error) {
	tok, err := Read(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, err
	}
	dir := filepath.Dir(path)
	if err := mkdir(dir); err != nil {
		return "", fmt.Errorf("create token directory %s: %w", dir, err)
	}
	tok, err = Generate()
	if err != nil {
		return "", err
	}
	created, err := create(path, tok)
	if err != nil {
		return "", err
	}
	if created {
		return tok, nil
	}
	// Someone else created the file first: use theirs.
	return readSettled(path)
}

// mkdir creates dir (and its parents) when missing, giving the directories it
// creates DirMode regardless of the umask.
func mkdir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := mkdir(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, DirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // created concurrently
		}
		return err
	}
	return os.Chmod(dir, DirMode)
}

// create writes tok to a temporary file and links it to path. It reports
// false, without error, when path already existed.
func create(path, tok string) (bool, error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, fmt.Errorf("write token %s: %w", path, err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := writeSync(tmp, tok); err != nil {
		return false, fmt.Errorf("write token %s: %w", tmpName, err)
	}
	err = os.Link(tmpName, path)
	switch {
	case err == nil:
		syncDir(dir)
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, nil
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.ENOTSUP), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EXDEV):
		// The file system has no hard links: create path exclusively instead.
		// A concurrent reader may then briefly see a short file, which
		// readSettled tolerates.
		return createExcl(path, tok)
	default:
		return false, fmt.Errorf("create token %s: %w", path, err)
	}
}

// createExcl creates path with O_EXCL and writes tok into it.
func createExcl(path, tok string) (bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, FileMode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("create token %s: %w", path, err)
	}
	if err := writeSync(f, tok); err != nil {
		os.Remove(path)
		return false, fmt.Errorf("write token %s: %w", path, err)
	}
	syncDir(filepath.Dir(path))
	return true, nil
}

// writeSync sets FileMode on f, writes tok and a newline, syncs and closes f.
func writeSync(f *os.File, tok string) error {
	err := f.Chmod(FileMode)
	if err == nil {
		_, err = f.WriteString(tok + "\n")
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a new directory entry durable; failures are not fatal since
// the file itself is complete either way.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// readSettled reads a token file that another process has just created. With
// hard links the file is complete as soon as it appears; the retries only
// matter for the O_EXCL fallback, where the winner may still be writing.
func readSettled(path string) (string, error) {
	var (
		tok string
		err error
	)
	for i := 0; i < 50; i++ {
		tok, err = Read(path)
		if err == nil || !errors.Is(err, ErrMalformed) {
			return tok, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", err
}
