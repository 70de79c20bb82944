package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchMask calls stop when the masked file is replaced or removed on the
// host while the sandbox runs (an editor's atomic save, a checkout): the
// mask is bound to the file's old directory entry, so the sandbox would
// see the new file, secrets and all. Only a file inside one of grants is
// watched (elsewhere the sandbox does not see it). Writes into the file
// itself keep the mask. It returns a function that ends the watch.
func (p *perRun) watchMask(grants []string, stop func(), stderr io.Writer) (end func()) {
	if p == nil {
		return func() {}
	}
	path, err := filepath.Abs(p.mask.Path)
	if err == nil {
		path, err = filepath.EvalSymlinks(path)
	}
	if err != nil || !under(path, grants) {
		return func() {}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return func() {}
	}
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_CREATE|unix.IN_DELETE|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF); err != nil {
		unix.Close(fd)
		return func() {}
	}
	f := os.NewFile(uintptr(fd), "inotify")
	name := filepath.Base(path)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return // ended (closed)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				off += unix.SizeofInotifyEvent + int(ev.Len)
				self := ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0
				if self || strings.TrimRight(string(nameBytes), "\x00") == name {
					fmt.Fprintf(stderr, "sodactl: %s was replaced on the host during the run, and the sandbox would see the new file without its mask: stopping the sandbox\n", path)
					stop()
					return
				}
			}
		}
	}()
	return func() { f.Close() }
}
