package sandboxinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"

	"github.com/soda-project/soda/internal/sandbox/protect"
	"github.com/soda-project/soda/internal/sandbox/wire"
)

// Repositories made during the run. protectGrants protects the
// repositories that exist when the sandbox is built; one the agent makes
// afterwards (git init, git clone, mkdir .git) would have writable hooks
// and configuration, and the user's next git command on the host would
// run what the agent put there. The repository guard closes that gap:
//
//   - GIT_TEMPLATE_DIR names an empty, read-only directory of the
//     sandbox (wire.GitTemplateDir), so that git init and git clone copy no
//     hooks and never write below .git/hooks;
//   - a guard process, forked by init before it confines itself, keeps
//     the privilege to mount in the sandbox's mount namespace (nothing
//     else: it runs no command and reads nothing but the grants). It
//     watches every read-write grant recursively with inotify (in a user
//     namespace too: fanotify's filesystem marks need the initial user
//     namespace) and, for each git directory that appears (a directory
//     named .git, one that holds HEAD and refs: a bare repository, a
//     submodule's or a linked worktree's git directory, or one that a
//     .git file or a commondir file names), makes .git/hooks if missing,
//     binds it read-only onto itself, moves what the agent put there
//     before (the race it may have won) to .git/soda-quarantine, not
//     executable, and keeps watching it: a file made there through a
//     descriptor or working directory taken before the mount is moved
//     away too;
//   - .git/config cannot be a mount point (git rewrites it by rename), so
//     the guard reads it (and config.worktree) after each write and
//     rewrites it without the keys that make git run a program
//     (protect.GitRunsKeys), by rename, through descriptors that follow no
//     symbolic link; a symbolic link there is removed;
//   - each step is reported on init's status pipe, which the guard keeps
//     open after the command starts: the host records "protected" and
//     "refused" audit records. Init stops the sandbox if the guard ends,
//     and lets it finish its queue before the sandbox ends.
//
// What is not covered is in docs/sandbox.md ("Repositories made during
// the run"); the host's plantWatch report at the end stays the backstop.

// guardArg0 and roleGuard mark the repository guard (argv[0] and
// wire.RoleEnv), which init starts from its own binary.
const (
	guardArg0 = "soda-sandbox-guard"
	roleGuard = "guard"
)

// guardWatchBudget bounds the directories the guard watches (inotify
// watches are a per-user resource of the host).
const guardWatchBudget = 65536

// guardSkipInGit are the directories of a git directory the guard does
// not enter (many, and no git directory is made there).
var guardSkipInGit = []string{"objects", "refs", "logs", "hooks", "lfs", "info", "rr-cache", "soda-quarantine"}

// makeGitTemplate makes wire.GitTemplateDir, empty (the skeleton is made
// read-only later).
func makeGitTemplate() error {
	if err := os.MkdirAll(wire.GitTemplateDir, 0o755); err != nil {
		return fmt.Errorf("git template directory: %w", err)
	}
	return nil
}

// guardConfig is what the guard needs from init's configuration.
type guardConfig struct {
	ReadWrite []string `json:"rw"`
	Unprotect []string `json:"unprotect,omitempty"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	UserNS    bool     `json:"userns"`
}

// repoGuard is init's handle on the guard process.
type repoGuard struct {
	pid int
	ctl *os.File // init's end of the control socket
}

// startRepoGuard forks the guard (init, after the cgroup placement and
// before it confines itself) with a copy of the status pipe. It returns
// nil when no read-write grant needs it.
func startRepoGuard(cfg *config, status *os.File) (*repoGuard, error) {
	gc := guardConfig{Unprotect: cfg.Unprotect, UID: cfg.UID, GID: cfg.GID, UserNS: cfg.UserNS}
	for _, g := range cfg.ReadWrite {
		if !underAny(g, cfg.Unprotect) {
			gc.ReadWrite = append(gc.ReadWrite, g)
		}
	}
	if len(gc.ReadWrite) == 0 {
		return nil, nil
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("repository guard: %w", err)
	}
	defer cfgR.Close()
	defer cfgW.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("repository guard: %w", err)
	}
	// Init's end is non-blocking, so that its reads can time out.
	_ = unix.SetNonblock(pair[0], true)
	ctl, theirs := os.NewFile(uintptr(pair[0]), "guard-ctl"), os.NewFile(uintptr(pair[1]), "guard-ctl")
	defer theirs.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("repository guard: %w", err)
	}
	defer null.Close()
	proc, err := os.StartProcess("/proc/self/exe", []string{guardArg0}, &os.ProcAttr{
		Env:   []string{wire.RoleEnv + "=" + roleGuard, "GOMAXPROCS=1"},
		Files: []*os.File{null, null, os.Stderr, cfgR, status, theirs},
	})
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("start the repository guard: %w", err)
	}
	if err := json.NewEncoder(cfgW).Encode(gc); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("configure the repository guard: %w", err)
	}
	g := &repoGuard{pid: proc.Pid, ctl: ctl}
	_ = proc.Release() // reaped by pid in init's loop
	return g, nil
}

// waitReady waits until the guard watches every grant (before the
// command starts).
func (g *repoGuard) waitReady() error {
	if g == nil {
		return nil
	}
	_ = g.ctl.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(g.ctl, b[:]); err != nil || b[0] != 'R' {
		return fmt.Errorf("the repository guard did not start: %v", err)
	}
	return nil
}

// died says whether pid, just reaped, was the guard's: the sandbox then
// stops (a repository made from now on would not be protected).
func (g *repoGuard) died(pid int) bool {
	if g == nil || pid != g.pid {
		return false
	}
	fmt.Fprintln(os.Stderr, "soda-sandbox-init: the repository guard ended; the sandbox is stopped (repositories made from now on would not be protected)")
	return true
}

// pidOf is the guard's pid (0: no guard).
func (g *repoGuard) pidOf() int {
	if g == nil {
		return 0
	}
	return g.pid
}

// drain lets the guard handle what is queued before the sandbox ends.
func (g *repoGuard) drain() {
	if g == nil {
		return
	}
	_ = g.ctl.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := g.ctl.Write([]byte{'D'}); err != nil {
		return
	}
	var b [1]byte
	_, _ = io.ReadFull(g.ctl, b[:])
}

// The guard process.

// watchKind is what a watched directory is to the guard.
type watchKind int

const (
	watchDir   watchKind = iota // a directory of a grant
	watchGit                    // a git directory
	watchHooks                  // the hooks of a git directory made during the run
)

// watched is one inotify watch.
type watched struct {
	path string
	kind watchKind
	// fresh: a git directory made during the run (its configuration is
	// neutralised, its hooks quarantined); false for those found at start.
	fresh     bool
	hooksDone bool // watchGit (fresh): its hooks are protected
	git       int  // watchGit, watchHooks (fresh): the git directory (O_PATH)
	hooks     int  // watchHooks: the hooks directory under the read-only mount
}

// guard is the repository guard's state.
type guard struct {
	cfg                 guardConfig
	enc                 *json.Encoder
	ino                 int
	roots               map[string]int // grant → O_PATH descriptor
	wds                 map[int32]*watched
	seen                map[[2]uint64]*watched // git directories handled, by device and inode
	initial             map[[2]uint64]bool     // git directories found at start
	pending             map[string]bool        // git directories named by a .git or commondir file, not made yet
	starting, unwatched int
	watches             int
	reported            bool
}

// runRepoGuard is the guard's main (see above).
func runRepoGuard() int {
	runtime.LockOSThread() // fsuid is per thread: every file operation runs here
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	cfgFile, status, ctl := os.NewFile(3, "config"), os.NewFile(4, "status"), os.NewFile(5, "ctl")
	var gc guardConfig
	line, err := bufio.NewReader(cfgFile).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &gc)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soda-sandbox-guard: read configuration:", err)
		return 125
	}
	cfgFile.Close()
	if !gc.UserNS {
		// Files are made as the sandbox's uid: through an idmapped grant
		// that is the grant's owner on disk (and root maps to nothing).
		// This drops the filesystem capabilities (DAC override): the
		// guard acts on what the agent could act on.
		unix.Setfsgid(gc.GID)
		unix.Setfsuid(gc.UID)
	}
	if err := dropPrivileges(); err != nil {
		fmt.Fprintln(os.Stderr, "soda-sandbox-guard:", err)
		return 125
	}
	g := &guard{cfg: gc, enc: json.NewEncoder(status), roots: map[string]int{}, wds: map[int32]*watched{},
		seen: map[[2]uint64]*watched{}, initial: map[[2]uint64]bool{}, pending: map[string]bool{}}
	if g.ino, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK); err != nil {
		fmt.Fprintln(os.Stderr, "soda-sandbox-guard: inotify:", err)
		return 125
	}
	g.starting = 1
	for _, root := range gc.ReadWrite {
		fd, err := unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			g.emit("refused", fmt.Sprintf("repositories made in %s during the run are not protected: %v", root, err))
			continue
		}
		g.roots[root] = fd
		g.walkPath(root, false)
	}
	g.starting = 0
	_ = g.enc.Encode(wire.Status{Layer: wire.LayerMountNS, State: "applied", Detail: fmt.Sprintf(
		"repositories made during the run get read-only hooks and a configuration that runs nothing: %d directories watched", g.watches)})
	if g.unwatched > 0 {
		g.reported = true
		g.emit("refused", fmt.Sprintf("%d directories of the grants are not watched (inotify watch limit, or the guard's budget of %d): a repository made there is only reported at the end", g.unwatched, guardWatchBudget))
	}
	if _, err := ctl.Write([]byte{'R'}); err != nil {
		return 0
	}
	buf := make([]byte, 64<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(g.ino), Events: unix.POLLIN}, {Fd: int32(ctl.Fd()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return 125
		}
		if fds[0].Revents != 0 {
			g.readEvents(buf)
		}
		if fds[1].Revents != 0 {
			var b [1]byte
			if n, _ := unix.Read(int(ctl.Fd()), b[:]); n != 1 {
				return 0 // init is gone
			}
			g.readEvents(buf) // drain: what is queued now
			_, _ = unix.Write(int(ctl.Fd()), []byte{'d'})
		}
	}
}

// emit reports one event to the host (at most one pipe buffer, so that
// lines from init and the guard never mix).
func (g *guard) emit(event, detail string) {
	_ = g.enc.Encode(wire.Status{Event: event, Detail: truncate(detail, 600)})
}

// readEvents handles every queued inotify event.
func (g *guard) readEvents(buf []byte) {
	for {
		n, err := unix.Read(g.ino, buf)
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if i := slices.Index(b, 0); i >= 0 {
					b = b[:i]
				}
				name = string(b)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			g.event(ev.Wd, ev.Mask, name)
		}
	}
}

// event handles one inotify event.
func (g *guard) event(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		// Events were lost: look at everything again.
		for root := range g.roots {
			g.walkPath(root, false)
		}
		return
	}
	w := g.wds[wd]
	if w == nil {
		return
	}
	if mask&unix.IN_IGNORED != 0 {
		delete(g.wds, wd)
		g.watches--
		if w.kind == watchHooks {
			unix.Close(w.hooks)
		}
		return
	}
	if name == "" {
		return
	}
	p := w.path + "/" + name
	switch {
	case w.kind == watchHooks:
		g.quarantine(w, []string{name})
	case mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		if name == "refs" {
			g.maybeGitDir(w.path)
		}
		if w.kind == watchGit && slices.Contains(guardSkipInGit, name) {
			return
		}
		g.walkPath(p, w.kind == watchGit)
	case name == ".git":
		g.gitFile(p)
	case w.kind == watchGit && w.fresh && (name == "config" || name == "config.worktree"):
		g.checkConfig(w, name)
	case w.kind == watchGit && name == "commondir":
		if t := readPointer(g, p, ""); t != "" {
			g.target(t)
		}
	case name == "HEAD":
		g.maybeGitDir(w.path)
	}
}

// open opens p (inside a grant) with flags, following no symbolic link
// and never leaving the grant.
func (g *guard) open(p string, flags int) (int, error) {
	best := ""
	for root := range g.roots {
		if (p == root || strings.HasPrefix(p, root+"/")) && len(root) > len(best) {
			best = root
		}
	}
	if best == "" {
		return -1, fmt.Errorf("%s is not in a read-write grant", p)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, best), "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(g.roots[best], rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	g.exhausted(err)
	return fd, err
}

// exhausted ends the guard when it has no descriptor left (an agent that
// makes repositories by the thousand): init then stops the sandbox, since
// the next repository could not be protected.
func (g *guard) exhausted(err error) {
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
		g.emit("refused", "the repository guard has no file descriptor left; the sandbox is stopped (a repository made from now on could not be protected)")
		os.Exit(1)
	}
}

// dropPrivileges leaves the guard CAP_SYS_ADMIN (to mount) and nothing
// else, on every thread, and no_new_privs.
func dropPrivileges() error {
	_ = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective = 1 << unix.CAP_SYS_ADMIN
	data[0].Permitted = 1 << unix.CAP_SYS_ADMIN
	if _, _, errno := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}

// addWatch watches the directory open as fd.
func (g *guard) addWatch(fd int, w *watched) bool {
	if g.watches >= guardWatchBudget {
		g.notWatched(w.path, unix.ENOSPC)
		return false
	}
	mask := uint32(unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK)
	if w.kind == watchHooks {
		mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_ONLYDIR
	}
	wd, err := unix.InotifyAddWatch(g.ino, fmt.Sprintf("/proc/self/fd/%d", fd), mask)
	if err != nil {
		g.notWatched(w.path, err)
		return false
	}
	if old := g.wds[int32(wd)]; old != nil {
		// The same directory again (renamed, or a rescan): keep what is
		// known about it, under its new name.
		old.path = w.path
		if w.kind > old.kind {
			old.kind, old.fresh, old.git, old.hooks = w.kind, w.fresh, w.git, w.hooks
		}
		return true
	}
	g.wds[int32(wd)] = w
	g.watches++
	return true
}

func (g *guard) notWatched(p string, err error) {
	g.unwatched++
	if g.starting == 0 && !g.reported {
		g.reported = true
		g.emit("refused", fmt.Sprintf("directories of the grants are no longer all watched (%v, first %s): a repository made there is only reported at the end", err, p))
	}
}

// walkPath watches the directory p and everything below it, handling
// the git directories and .git files found there. inGit: p is inside a
// git directory.
func (g *guard) walkPath(p string, inGit bool) {
	fd, err := g.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	g.walk(fd, p, inGit, 0)
}

// walk is walkPath on the open directory fd (closed when done).
func (g *guard) walk(fd int, p string, inGit bool, depth int) {
	dir := os.NewFile(uintptr(fd), p)
	defer dir.Close()
	if depth > 64 {
		return
	}
	isGit := filepath.Base(p) == ".git" || g.pending[p] || hasGitLayout(fd)
	if isGit {
		delete(g.pending, p)
		g.gitDir(p)
	}
	// Watch first, then list: what is made in between is seen either way.
	if !isGit && !g.addWatch(fd, &watched{path: p, kind: watchDir}) {
		return
	}
	ents, err := dir.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case e.IsDir():
			if (isGit || inGit) && slices.Contains(guardSkipInGit, name) {
				continue
			}
			if !isGit && !inGit && slices.Contains(protect.RepoSkip, name) {
				continue
			}
			cfd, err := unix.Openat2(fd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
			g.exhausted(err)
			if err != nil {
				continue
			}
			g.walk(cfd, p+"/"+name, isGit || inGit, depth+1)
		case name == ".git" && e.Type().IsRegular():
			g.gitFile(p + "/" + name)
		}
	}
}

// hasGitLayout says whether the directory fd holds HEAD and refs, as a
// git directory does (a bare repository, a submodule's git directory).
func hasGitLayout(fd int) bool {
	var st unix.Stat_t
	if unix.Fstatat(fd, "HEAD", &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	return unix.Fstatat(fd, "refs", &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
}

// maybeGitDir handles p if it has become a git directory.
func (g *guard) maybeGitDir(p string) {
	fd, err := g.open(p, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if hasGitLayout(fd) {
		g.gitDir(p)
	}
}

// gitDir protects the git directory p (once): found at start, it is only
// watched (protectGrants did the rest); made during the run, its hooks
// are bound read-only and emptied, its configuration checked. A git
// directory that is neither named .git nor holds HEAD and refs (a linked
// worktree's, which a .git file names: git takes hooks, refs and the
// configuration from its commondir) gets no hooks of its own until it
// holds refs, so that git worktree remove can still remove it.
func (g *guard) gitDir(p string) {
	gfd, err := g.open(p, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	var st unix.Stat_t
	if err := unix.Fstat(gfd, &st); err != nil {
		unix.Close(gfd)
		return
	}
	key := [2]uint64{st.Dev, st.Ino}
	own := filepath.Base(p) == ".git" || hasGitLayout(gfd)
	if w := g.seen[key]; w != nil {
		if w.fresh && own && !w.hooksDone {
			g.emit("protected", fmt.Sprintf("repository made during the run: %s: %s", p, strings.Join(g.freshHooks(w), ", ")))
		}
		unix.Close(gfd)
		return
	}
	if g.starting > 0 {
		w := &watched{path: p, kind: watchGit}
		g.seen[key], g.initial[key] = w, true
		g.addWatch(gfd, w)
		unix.Close(gfd)
		return
	}
	fresh := !g.initial[key]
	w := &watched{path: p, kind: watchGit, fresh: fresh, git: gfd}
	g.seen[key] = w
	g.addWatch(gfd, w)
	if !fresh {
		unix.Close(gfd)
		return
	}
	var done []string
	if own {
		done = g.freshHooks(w)
	}
	for _, name := range []string{"config", "config.worktree"} {
		if !underAny(p+"/"+name, g.cfg.Unprotect) {
			g.checkConfig(w, name)
		}
	}
	if !underAny(p+"/config", g.cfg.Unprotect) {
		done = append(done, "configuration kept from running programs")
	}
	if t := readPointer(g, p+"/commondir", ""); t != "" {
		g.target(t)
	}
	g.emit("protected", fmt.Sprintf("repository made during the run: %s: %s", p, strings.Join(done, ", ")))
}

// freshHooks protects the hooks of the fresh git directory w and says
// what it did.
func (g *guard) freshHooks(w *watched) []string {
	w.hooksDone = true
	if underAny(w.path+"/hooks", g.cfg.Unprotect) {
		return nil
	}
	if err := g.protectHooks(w.path, w.git); err != nil {
		g.emit("refused", fmt.Sprintf("repository made during the run: %s: hooks NOT protected: %v (reported again at the end if anything is planted)", w.path, err))
		return nil
	}
	return []string{"hooks read-only"}
}

// protectHooks makes p/hooks a read-only mount of itself, moves what is
// already there to the quarantine and watches it.
func (g *guard) protectHooks(p string, gfd int) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var hfd int
	var err error
	for try := 0; ; try++ {
		if try == 8 {
			return fmt.Errorf("open %s/hooks: %w", p, err)
		}
		if hfd, err = unix.Openat2(gfd, "hooks", how); err == nil {
			break
		}
		g.exhausted(err)
		switch {
		case errors.Is(err, unix.ENOENT):
			_ = unix.Mkdirat(gfd, "hooks", 0o755)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
			// A link or a file where hooks belongs: moved away.
			g.quarantineAt(p, gfd, gfd, []string{"hooks"})
		default:
			return fmt.Errorf("open %s/hooks: %w", p, err)
		}
	}
	var sfs unix.Statfs_t
	if unix.Fstatfs(hfd, &sfs) == nil && sfs.Flags&unix.ST_RDONLY != 0 {
		unix.Close(hfd)
		return nil // already read-only (a grant, or protectGrants)
	}
	tree, err := unix.OpenTree(hfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		unix.Close(hfd)
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		unix.Close(hfd)
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", hfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		unix.Close(hfd)
		return fmt.Errorf("move_mount: %w", err)
	}
	// hfd is the directory below the mount: what the agent won the race
	// with is moved away through it, now and whenever more appears.
	w := &watched{path: p + "/hooks", kind: watchHooks, fresh: true, git: gfd, hooks: hfd}
	if !g.addWatch(hfd, w) {
		g.purge(w)
		unix.Close(hfd)
		return nil
	}
	g.purge(w)
	return nil
}

// purge moves every entry of a hooks directory but git's *.sample to the
// quarantine.
func (g *guard) purge(w *watched) {
	fd, err := unix.Openat(w.hooks, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	dir := os.NewFile(uintptr(fd), w.path)
	names, _ := dir.Readdirnames(-1)
	dir.Close()
	g.quarantine(w, names)
}

// quarantine moves names out of a watched hooks directory.
func (g *guard) quarantine(w *watched, names []string) {
	g.quarantineAt(strings.TrimSuffix(w.path, "/hooks"), w.git, w.hooks, names)
}

// quarantineAt moves the names in directory fd to gitDir/soda-quarantine
// (git runs nothing from there) without their execute bits, and reports
// them. git's *.sample hooks stay (git never runs them).
func (g *guard) quarantineAt(gitDir string, gfd, fd int, names []string) {
	var moved []string
	for _, name := range names {
		if strings.HasSuffix(name, ".sample") && fd != gfd {
			continue
		}
		_ = unix.Mkdirat(gfd, "soda-quarantine", 0o700)
		qfd, err := unix.Openat2(gfd, "soda-quarantine", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		if err != nil {
			// No quarantine to be had: removed.
			if unix.Unlinkat(fd, name, 0) == nil {
				moved = append(moved, name+" (removed)")
			}
			continue
		}
		to := fmt.Sprintf("%s.%d", name, time.Now().UnixNano())
		if err := unix.Renameat2(fd, name, qfd, to, unix.RENAME_NOREPLACE); err == nil {
			var st unix.Stat_t
			if unix.Fstatat(qfd, to, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				_ = unix.Fchmodat(qfd, to, st.Mode&0o666, 0)
			}
			moved = append(moved, name)
		} else if unix.Unlinkat(fd, name, 0) == nil {
			moved = append(moved, name+" (removed)")
		}
		unix.Close(qfd)
	}
	if len(moved) > 0 {
		where := gitDir + "/hooks/"
		if fd == gfd {
			where = gitDir + "/"
		}
		g.emit("refused", fmt.Sprintf("planted in a repository made during the run, moved to %s/soda-quarantine: %s%s", gitDir, where, strings.Join(moved, " "+where)))
	}
}

// checkConfig rewrites the configuration file name of the fresh git
// directory w without the keys that make git run a program; a symbolic
// link there is removed.
func (g *guard) checkConfig(w *watched, name string) {
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(w.git, name, how)
	if errors.Is(err, unix.ELOOP) {
		if unix.Unlinkat(w.git, name, 0) == nil {
			g.emit("refused", fmt.Sprintf("a symbolic link as the configuration of a repository made during the run, removed: %s/%s", w.path, name))
		}
		return
	}
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	const maxConfig, nothing = 1 << 20, "[core]\n\trepositoryformatversion = 0\n"
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return
	}
	var clean string
	var removed []string
	switch {
	case len(b) > maxConfig:
		// git reads past what is read here: nothing is kept.
		clean, removed = nothing, []string{fmt.Sprintf("everything (more than %d bytes)", maxConfig)}
	case !protect.GitConfigRuns(string(b)):
		return
	default:
		clean, removed = stripGitRuns(string(b))
		if protect.GitConfigRuns(clean) {
			// Cannot be (one reading removes what the other finds);
			// should it ever be, nothing is kept.
			clean, removed = nothing, []string{"everything (not understood)"}
		}
	}
	tmp := fmt.Sprintf("%s.soda-%d", name, os.Getpid())
	_ = unix.Unlinkat(w.git, tmp, 0)
	tfd, err := unix.Openat(w.git, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(st.Mode&0o666))
	if err != nil {
		g.emit("refused", fmt.Sprintf("the configuration of a repository made during the run names a program and could NOT be rewritten: %s/%s: %v", w.path, name, err))
		return
	}
	_, werr := unix.Write(tfd, []byte(clean))
	unix.Close(tfd)
	if werr != nil || unix.Renameat(w.git, tmp, w.git, name) != nil {
		_ = unix.Unlinkat(w.git, tmp, 0)
		g.emit("refused", fmt.Sprintf("the configuration of a repository made during the run names a program and could NOT be rewritten: %s/%s", w.path, name))
		return
	}
	g.emit("refused", fmt.Sprintf("removed from the configuration of a repository made during the run, %s/%s: %s", w.path, name, strings.Join(removed, ", ")))
}

// gitFile handles a .git file ("gitdir: PATH"): the directory it names
// is protected as a git directory made during the run, now or once it
// exists.
func (g *guard) gitFile(p string) {
	if t := readPointer(g, p, "gitdir:"); t != "" {
		g.target(t)
	}
}

// target protects the git directory t that a .git or commondir file
// names, if it is in a read-write grant: at once, or once it is made.
func (g *guard) target(t string) {
	if r, err := filepath.EvalSymlinks(t); err == nil {
		t = r
	}
	if !slices.ContainsFunc(g.cfg.ReadWrite, func(root string) bool { return strings.HasPrefix(t, root+"/") }) {
		return
	}
	if fd, err := g.open(t, unix.O_PATH|unix.O_DIRECTORY); err == nil {
		unix.Close(fd)
		g.gitDir(t)
		return
	}
	g.pending[t] = true
}

// readPointer reads the path a .git file (prefix "gitdir:") or a
// commondir file (prefix "", relative to base) names, or "".
func readPointer(g *guard, p, prefix string) string {
	fd, err := g.open(p, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return ""
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return ""
	}
	t, ok := strings.CutPrefix(strings.TrimSpace(string(b)), prefix)
	t = strings.TrimSpace(t)
	if !ok || t == "" {
		return ""
	}
	if !filepath.IsAbs(t) {
		t = filepath.Join(filepath.Dir(p), t)
	}
	return filepath.Clean(t)
}

// underAny says whether p is one of paths or below one.
func underAny(p string, paths []string) bool {
	return slices.ContainsFunc(paths, func(u string) bool { return p == u || strings.HasPrefix(p, u+"/") })
}

// stripGitRuns returns the configuration text without the keys that make
// git run a program (protect.GitRunsKeys), as protect.GitConfigLines reads
// them (the reading protect.GitConfigRuns makes), and the keys it removed.
// A value continued on the next lines (a trailing backslash) goes with its
// key; the section headers on a removed key's line stay.
func stripGitRuns(text string) (string, []string) {
	var out strings.Builder
	var removed []string
	for l := range protect.GitConfigLines(text) {
		switch {
		case !l.Runs():
			out.WriteString(l.Text)
		case !l.Continued:
			removed = append(removed, l.ShortKey())
			if l.Headers != "" {
				out.WriteString(l.Headers + "\n")
			}
		}
	}
	return out.String(), removed
}

// truncate cuts s to n bytes, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
