package sandboxsession

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// blobStore holds file contents for the host (a session's baseline, an
// isolated child's seed) in an unlinked file on disk, not in the server's
// memory: what a session seeds costs the host page cache, which the
// kernel can reclaim, and never more than its bound. The file has no name
// (O_TMPFILE, or removed at once), so it goes with the process however
// that ends: sessions are never persisted.
type blobStore struct {
	mu   sync.Mutex
	f    *os.File
	size int64
	max  int64
	// bySum finds contents already stored (hard links, repeated files).
	bySum map[[32]byte]int64
}

// newBlobStore makes a store of at most max bytes in dir.
func newBlobStore(dir string, max int64) (*blobStore, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := openTmpfile(dir)
	if err != nil {
		// A filesystem without O_TMPFILE: a named file, removed at once.
		if f, err = os.CreateTemp(dir, ".soda-session-store-"); err != nil {
			return nil, fmt.Errorf("session store in %s: %w", dir, err)
		}
		_ = os.Remove(f.Name())
	}
	return &blobStore{f: f, max: max, bySum: map[[32]byte]int64{}}, nil
}

// errStoreFull says that a store reached its bound.
var errStoreFull = errors.New("more than the workspace can hold")

// put appends n bytes of r and returns where they are; contents stored
// before are not stored twice.
func (s *blobStore) put(r io.Reader, n int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size+n > s.max {
		return 0, errStoreFull
	}
	h := sha256.New()
	off := s.size
	w := io.NewOffsetWriter(s.f, off)
	if _, err := io.CopyN(io.MultiWriter(w, h), r, n); err != nil {
		return 0, fmt.Errorf("session store: %w", err)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	if prev, ok := s.bySum[sum]; ok {
		return prev, nil // the space past s.size is reused by the next put
	}
	s.bySum[sum] = off
	s.size += n
	return off, nil
}

// putBytes stores b.
func (s *blobStore) putBytes(b []byte) (int64, error) {
	return s.put(bytes.NewReader(b), int64(len(b)))
}

// reader returns the n bytes stored at off.
func (s *blobStore) reader(off, n int64) io.Reader {
	return io.NewSectionReader(s.f, off, n)
}

// read returns the n bytes stored at off.
func (s *blobStore) read(off, n int64) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(s.reader(off, n), b); err != nil {
		return nil, fmt.Errorf("session store: %w", err)
	}
	return b, nil
}

// Size is how many bytes the store holds.
func (s *blobStore) Size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// close frees the store.
func (s *blobStore) close() {
	if s != nil {
		s.f.Close()
	}
}
