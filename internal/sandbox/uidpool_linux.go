package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// uidLease is a uid held for the lifetime of one sandbox.
type uidLease struct {
	uid  int
	lock *os.File
}

// uidPool leases the uids of a range (UIDRange); it is safe for
// concurrent use.
//
// Each lease starts probing one slot further than the one before, from a
// random slot per pool: a long-lived process (a daemon) does not probe the
// same first slots for every sandbox, and two processes rarely probe the
// same ones (the flock decides either way).
type uidPool struct {
	base, count int    // the range
	dir         string // its lock files
	once        sync.Once
	seed        int
	next        atomic.Uint64 // leases so far
}

// start returns the slot the next lease probes first.
func (p *uidPool) start() int {
	p.once.Do(func() { p.seed = rand.IntN(p.count) })
	n := p.next.Add(1) - 1
	return (p.seed + int(n%uint64(p.count))) % p.count
}

// lease locks the first free uid of the range from start().
func (p *uidPool) lease() (*uidLease, error) {
	dir := p.dir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	start := p.start()
	for i := 0; i < p.count; i++ {
		uid := p.base + (start+i)%p.count
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(uid)), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open uid lock: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, fmt.Errorf("lock uid %d: %w", uid, err)
		}
		return &uidLease{uid: uid, lock: f}, nil
	}
	return nil, fmt.Errorf("all %d sandbox uids from %d are in use", p.count, p.base)
}

func (l *uidLease) release() {
	if l != nil && l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
}

// idmapNS is a user namespace whose only mapping is "sandbox uid → owner",
// used to idmap a granted directory so that the sandbox uid acts as the
// directory's owner there (files it creates belong to the owner on disk,
// files the owner has are writable to it). An open descriptor of the
// namespace keeps it alive (namespaces(7)); the mounts made with it hold
// their own reference.
type idmapNS struct {
	owner uint32
	fd    *os.File
}

// newIDMapNS makes the namespace: the init binary initPath is started in
// its hold role in a new user namespace mapping ownerUID/ownerGID inside to
// uid/gid outside (the maps are written before its execve, which Start
// waits for), the namespace is opened, and the process is killed at once:
// nothing needs it any longer, and on this path its Go start-up (several
// milliseconds of CPU) would only compete with the sandbox's own.
func newIDMapNS(initPath string, uid, gid int, ownerUID, ownerGID uint32) (*idmapNS, error) {
	cmd := exec.Command(initPath)
	cmd.Args = []string{wire.HoldArg0}
	cmd.Env = []string{wire.RoleEnv + "=" + wire.RoleHold}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER,
		// An idmapped mount shows an id stored on disk (the namespace's
		// inside value) as the outside value: the owner's files appear as
		// the sandbox uid's, and what the sandbox creates is stored as the
		// owner's.
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(ownerUID), HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(ownerGID), HostID: gid, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start user namespace holder: %w", err)
	}
	fd, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("open user namespace: %w", err)
	}
	return &idmapNS{owner: ownerUID, fd: fd}, nil
}

func (n *idmapNS) close() {
	n.fd.Close()
}
