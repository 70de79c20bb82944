package imagestore

import (
	"errors"
	"fmt"
)

// Reasons for which Unpack refuses a layer entry; an *EntryError wraps one
// (errors.Is).
var (
	// ErrTraversal: a name with a ".." component.
	ErrTraversal = errors.New("path traversal (a \"..\" component)")
	// ErrSymlinkEscape: a relative symbolic link followed on the way to
	// an entry climbs above the image root, or links loop.
	ErrSymlinkEscape = errors.New("a symbolic link on the way leads out of the image")
	// ErrHardlinkOutside: a hard link whose target is not a file inside
	// the image.
	ErrHardlinkOutside = errors.New("hard link to something outside the image")
	// ErrNotDir: a component on the way is not a directory.
	ErrNotDir = errors.New("a component on the way is not a directory")
	// ErrBadWhiteout: a whiteout naming no single entry (.wh.., .wh.).
	ErrBadWhiteout = errors.New("whiteout of no single entry")
	// ErrPathTooLong: a name or link target longer than Limits.MaxPathLen,
	// or a component longer than 255 bytes.
	ErrPathTooLong = errors.New("path too long")
	// ErrTooManyEntries: more entries than Limits.MaxEntries.
	ErrTooManyEntries = errors.New("too many entries")
	// ErrFileTooLarge: a file larger than Limits.MaxFileBytes.
	ErrFileTooLarge = errors.New("file too large")
	// ErrImageTooLarge: files adding up to more than Limits.MaxTotalBytes.
	ErrImageTooLarge = errors.New("files too large in total")
	// ErrDecompressionBomb: a layer whose decompressed stream exceeds
	// Limits.MaxLayerBytes.
	ErrDecompressionBomb = errors.New("decompressed layer larger than its bound")
	// ErrSkipped: an entry not created (a device node, a FIFO, an
	// unknown type); reported in UnpackReport.Skipped, never returned.
	ErrSkipped = errors.New("skipped")
)

// EntryError is a refusal of one entry of one layer.
type EntryError struct {
	Layer string // the layer's digest (sha256:…)
	Entry string // the entry's name as the tar stream gives it
	Err   error  // one of the Err… reasons above
}

func (e *EntryError) Error() string {
	name := e.Entry
	if len(name) > 200 {
		name = name[:200] + "…"
	}
	return fmt.Sprintf("layer %s: entry %q: %v", e.Layer, name, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

// DigestMismatchError is a blob whose content does not hash to the digest
// (or size) its descriptor names; nothing of it is stored.
type DigestMismatchError struct {
	What     string // "layer", "config", "manifest", "diff_id"
	Want     string
	Got      string
	WantSize int64 // -1: not checked
	GotSize  int64
	Err      error // the read error that went with it, if any
}

func (e *DigestMismatchError) Error() string {
	msg := fmt.Sprintf("%s %s: content has digest %s", e.What, e.Want, e.Got)
	if e.WantSize >= 0 && e.WantSize != e.GotSize {
		msg = fmt.Sprintf("%s %s: %d bytes, want %d", e.What, e.Want, e.GotSize, e.WantSize)
	}
	return msg + "; refused, nothing stored"
}

func (e *DigestMismatchError) Unwrap() error { return e.Err }

// StallError is a registry that sent nothing for the stall timeout.
type StallError struct {
	Host  string
	After string // the timeout, formatted
}

func (e *StallError) Error() string {
	return fmt.Sprintf("registry %s stalled: nothing received for %s", e.Host, e.After)
}

// Timeout reports true: a stall is a timeout.
func (e *StallError) Timeout() bool { return true }

// NotFoundError is a reference or digest the store does not hold.
type NotFoundError struct{ Ref string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("image %s: not in the store", e.Ref) }

// InUseError is an image Remove will not remove: a lease holds it.
type InUseError struct{ Digest string }

func (e *InUseError) Error() string { return fmt.Sprintf("image %s is in use", e.Digest) }
