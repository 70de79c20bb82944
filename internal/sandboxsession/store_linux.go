package sandboxsession

import (
	"os"

	"golang.org/x/sys/unix"
)

// openTmpfile opens an unnamed file in dir (O_TMPFILE): nothing to remove,
// nothing another process can open by name.
func openTmpfile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), dir+"/(session store)"), nil
}
