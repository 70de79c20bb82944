// Package token manages the bearer token files that authenticate MCP clients
// to soda-mcpd (by default /var/lib/soda/mcp/NAME.token).
//
// A token file holds exactly 64 lowercase hexadecimal characters (32 random
// bytes), optionally followed by one newline. Ensure creates the file on first
// use; Read only reads it. Files are created with mode 0640 so that the owning
// group (the operators allowed to hand tokens to clients) can read them.
//
// Both refuse a token path that is not a regular file (a FIFO, device,
// directory or symbolic link) without ever blocking in open(2), a token file
// that users other than its owner and group may read or write, and a token
// directory that they may write (see ErrInsecure).
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

// ErrInsecure is wrapped by the errors of Read and Ensure when the token file
// is not a regular file, when users other than its owner and group may read
// or write it, or when they may write its directory (and so replace it).
var ErrInsecure = errors.New("insecure token file")

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
// file: when it is absent the error wraps fs.ErrNotExist. It refuses, with an
// error wrapping ErrInsecure, what checkFile and checkDir refuse.
func Read(path string) (string, error) {
	f, err := open(path)
	if err != nil {
		return "", err
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

// open opens the token file for reading after checking it and its directory.
// It never blocks: the path is checked with lstat(2) first, so that a FIFO
// or device is refused without being opened, and opened with O_NONBLOCK and
// O_NOFOLLOW, so that one swapped in between is not waited on or followed
// either; fstat(2) of what was opened then decides.
func open(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("read token %s: %w", path, err)
	}
	if err := checkFile(path, fi); err != nil {
		return nil, err
	}
	if err := checkDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, checkFile(path, fs.FileInfo(symlinkInfo{}))
		}
		return nil, fmt.Errorf("read token %s: %w", path, err)
	}
	fi, err = f.Stat()
	if err == nil {
		err = checkFile(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// symlinkInfo stands for a path that O_NOFOLLOW found to be a symbolic link.
type symlinkInfo struct{ fs.FileInfo }

func (symlinkInfo) Mode() fs.FileMode { return fs.ModeSymlink }

// checkFile refuses a token file that is not a regular file, or that users
// other than its owner and group may read (the token may have leaked) or
// write (they could replace it). A group-writable file is accepted: the
// group is the operators'.
func checkFile(path string, fi fs.FileInfo) error {
	mode := fi.Mode()
	if !mode.IsRegular() {
		return fmt.Errorf("token file %s: %w: it is %s, not a regular file; set TokenFile= (or --token-file) to a regular file, "+
			"or remove %s to have one created on the next start", path, ErrInsecure, kind(mode), path)
	}
	perm := mode.Perm()
	switch {
	case perm&0o002 != 0:
		return fmt.Errorf("token file %s: %w: it is writable by every user (mode %04o), so anyone could replace the token; "+
			"run chmod 0640 %s (and check its content: delete it to have a new token generated on the next start)", path, ErrInsecure, perm, path)
	case perm&0o004 != 0:
		return fmt.Errorf("token file %s: %w: it is readable by every user (mode %04o), so the token may have leaked; "+
			"run chmod 0640 %s, or delete it to have a new token generated on the next start (then reconfigure clients)", path, ErrInsecure, perm, path)
	}
	return nil
}

// checkDir refuses a token directory that users other than its owner and
// group may write: they could replace the token file, or create it before
// soda-mcpd does. The sticky bit does not help with the latter, so /tmp is
// refused too. A directory others may read or search is accepted, since the
// file's own mode keeps them from reading the token.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("token directory %s: %w", dir, err)
	}
	if perm := fi.Mode().Perm(); perm&0o002 != 0 {
		if fi.Mode()&fs.ModeSticky != 0 {
			perm |= 0o1000
		}
		return fmt.Errorf("token directory %s: %w: it is writable by every user (mode %04o), so anyone could replace the token file; "+
			"run chmod o-w %s, or set TokenFile= to a path in a directory of its own (for example /var/lib/soda/mcp)", dir, ErrInsecure, perm, dir)
	}
	return nil
}

// kind names a non-regular file type for error messages.
func kind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0:
		return "a device"
	default:
		return "a special file"
	}
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
	if err := checkDir(dir); err != nil {
		return "", err
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
