package sandboxinit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/soda-project/soda/internal/sandbox/wire"
)

// The sandbox's root is a tmpfs that init builds in its own mount
// namespace and pivots into:
//
//	/usr /etc /var /opt, /bin /sbin /lib* (or their merged-/usr links)
//	                        the host's, bound read-only, nosuid, nodev; no
//	                        other top-level directory of the host exists
//	/sys                    a fresh sysfs of the sandbox's network namespace,
//	                        read-only: CPU topology and the like, but no
//	                        network device but lo, and /sys/block,
//	                        /sys/class/block, /sys/dev/block empty
//	/sys/fs/cgroup          the cgroup hierarchies as the host mounts them,
//	                        read-only and rooted at the sandbox's own
//	                        cgroup (its cgroup namespace; mounted once init
//	                        is placed, see mountCgroupFS)
//	/proc                   a fresh procfs of the sandbox's PID namespace;
//	                        cmdline and kernel/random/boot_id replaced
//	/etc/machine-id         a random one per sandbox (and
//	                        /var/lib/dbus/machine-id when it is a file)
//	/dev                    null zero full random urandom tty, own devpts, /dev/shm
//	/tmp /var/tmp /dev/shm  private, noexec: one tmpfs of TmpSize bytes
//	                        (privateTmp), a directory of it each
//	/run /home /root /mnt /media, /var/lib/soda
//	                        empty: no host socket (D-Bus, systemd, docker,
//	                        ssh-agent, X11) and no other user's files
//	/home/agent             the sandbox's home (read-write)
//	granted paths           at their host path, read-only or read-write
//	/etc/resolv.conf        points at the sandbox's DNS sink (127.0.0.1)
//
// Every host mount becomes read-only in one mount_setattr(AT_RECURSIVE)
// call, so that submounts (a /var on another disk) are covered as well.
const oldRoot = "/.oldroot"

// systemTop are the top-level host directories the sandbox sees (read
// only). Everything else at the top of the host (/srv, /boot, /work, data
// disks, …) does not exist in the sandbox unless granted.
var systemTop = []string{"usr", "etc", "var", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// hiddenTop are top-level directories that exist in the sandbox but empty.
var hiddenTop = []string{"run", "home", "root", "mnt", "media", "tmp"}

// hiddenBelow are host directories below read-only binds that are hidden
// too; missing ones are skipped. /var/home and /var/roothome are where
// /home and /root point on image-based systems (Fedora Silverblue, CoreOS).
var hiddenBelow = []string{"/var/run", "/var/tmp", "/var/home", "/var/roothome", "/var/mnt", "/var/lib/soda",
	"/var/lib/sss/pipes", "/var/spool/cron", "/var/lib/docker", "/var/lib/containers", "/var/lib/libvirt", "/etc/soda"}

// layerFailure is an error of buildRoot that belongs to another layer
// than the mount namespace.
type layerFailure struct {
	layer wire.Layer
	err   error
}

func (f *layerFailure) Error() string { return f.err.Error() }

// buildRoot builds the sandbox's root (see oldRoot) in init's mount
// namespace and pivots into it: the host's system read-only, its other
// places hidden, the home and the granted paths, what the host would run
// protected, the host's root detached and the skeleton frozen. A failure
// of another layer than the mount namespace is a layerFailure.
func buildRoot(cfg *config, userns []*os.File) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// How the host mounts its cgroup hierarchies, to be mounted the same
	// way (but rooted at the sandbox's cgroup) once init is placed.
	cfg.cgroupLayout = hostCgroupLayout()
	if err := pivotToTmpfs(); err != nil {
		return err
	}
	tmp, err := mountPrivateTmp(cfg.TmpSize)
	if err != nil {
		return err
	}

	// The top level and what is hidden below it.
	if err := populateTop(tmp, cfg.RootFS); err != nil {
		return err
	}
	hidden := append(slices.Clone(hiddenBelow), cfg.HideExtra...)
	if err := hide(hidden, tmp); err != nil {
		return err
	}
	if err := writeResolvConf(); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := maskIdentity(); err != nil {
		return err
	}

	// The home and the granted paths.
	grants, err := mountHomeAndGrants(cfg, userns)
	if err != nil {
		return err
	}
	if err := hideAgain(hidden, grants, tmp); err != nil {
		return err
	}
	if err := tmp.close(); err != nil {
		return err
	}
	// What the host would run later: git hooks and configuration, shell
	// start-up files (protect_linux.go).
	if cfg.protected, cfg.unprotected, err = protectGrants(cfg, oldRoot); err != nil {
		return err
	}
	// Files shown with other contents (an agent's MCP configuration
	// without its secrets), on top of everything else.
	if cfg.masked, err = maskFiles(cfg.Masks); err != nil {
		return err
	}

	if err := detachHostRoot(); err != nil {
		return err
	}
	return freezeSkeleton(hidden)
}

// pivotToTmpfs makes a tmpfs, mounted over /tmp (of this namespace only),
// the new root and pivots into it. The host's root, and its /tmp, are
// below oldRoot until detachHostRoot.
func pivotToTmpfs() error {
	if err := unix.Mount("soda-root", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=8m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	if err := os.Mkdir("/tmp"+oldRoot, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot("/tmp", "/tmp"+oldRoot); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	return os.Chdir("/")
}

// populateTop makes the root's top level from the host's: each entry as
// mountTopEntry says, then an empty tmpfs for each of hiddenTop the host
// lacks.
func populateTop(tmp *privateTmp, rootFS string) error {
	src := oldRoot
	if rootFS != "" {
		// An image: its own top level, every directory of it bound.
		src = filepath.Join(oldRoot, rootFS)
		for _, special := range []string{"proc", "sys", "dev", "tmp"} {
			if err := mountTopEntry(fakeDir(special), tmp, oldRoot, false); err != nil {
				return err
			}
		}
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read the sandbox's system root %s: %w", src, err)
	}
	for _, e := range entries {
		if rootFS != "" && slices.Contains([]string{"proc", "sys", "dev", "tmp"}, e.Name()) {
			continue
		}
		if err := mountTopEntry(e, tmp, src, rootFS != ""); err != nil {
			return err
		}
	}
	for _, name := range hiddenTop {
		if _, err := os.Lstat("/" + name); errors.Is(err, os.ErrNotExist) {
			if err := emptyTmpfs("/" + name); err != nil {
				return err
			}
		}
	}
	return nil
}

// mountTopEntry makes the sandbox's counterpart of one top-level entry e
// of the host: a fresh /proc, /sys and /dev, the private /tmp, an empty
// tmpfs for hiddenTop, the system directories (systemTop) bound
// read-only or, as links, copied; nothing for the rest.
func mountTopEntry(e fs.DirEntry, tmp *privateTmp, src string, image bool) error {
	name := e.Name()
	host := filepath.Join(src, name)
	dst := "/" + name
	switch {
	case "/"+name == oldRoot:
		return nil
	case name == "proc":
		return mountProc(dst)
	case name == "sys":
		return mountSys()
	case name == "dev":
		if err := buildDev(tmp); err != nil {
			return fmt.Errorf("build /dev: %w", err)
		}
		return nil
	case name == "tmp":
		return tmp.bind(dst)
	case slices.Contains(hiddenTop, name):
		return emptyTmpfs(dst)
	case !image && !slices.Contains(systemTop, name):
		return nil
	case e.Type()&os.ModeSymlink != 0:
		target, err := os.Readlink(host)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	default:
		return bindReadOnly(host, dst, e.IsDir())
	}
}

// fakeDir is a directory entry named name, for the top-level places a
// sandbox with an image makes whatever the image has.
type fakeDir string

func (d fakeDir) Name() string               { return string(d) }
func (d fakeDir) IsDir() bool                { return true }
func (d fakeDir) Type() fs.FileMode          { return fs.ModeDir }
func (d fakeDir) Info() (fs.FileInfo, error) { return nil, fs.ErrNotExist }

// mountProc mounts a fresh procfs of the sandbox's PID namespace at dst,
// its host-revealing files masked (maskProc).
func mountProc(dst string) error {
	if err := os.Mkdir(dst, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount fresh /proc: %w", err)
	}
	return maskProc()
}

// mountHomeAndGrants mounts the sandbox's home, its workspace if it has
// one, and the granted paths (mountGrants), which it returns.
func mountHomeAndGrants(cfg *config, userns []*os.File) ([]grant, error) {
	if err := mountHome(oldRoot+cfg.Home, cfg); err != nil {
		return nil, fmt.Errorf("mount home: %w", err)
	}
	if cfg.WorkspaceSize > 0 {
		if err := mountWorkspace(cfg); err != nil {
			return nil, fmt.Errorf("mount workspace: %w", err)
		}
	}
	return mountGrants(cfg, userns)
}

// hideAgain hides again the hidden places a grant of a parent (--ro /var)
// brought back, on top of it.
func hideAgain(hidden []string, grants []grant, tmp *privateTmp) error {
	var again []string
	for _, p := range hidden {
		for _, g := range grants {
			if strings.HasPrefix(p, g.path+"/") {
				again = append(again, p)
				break
			}
		}
	}
	return hide(again, tmp)
}

// detachHostRoot takes the host's root (oldRoot) out of the sandbox.
func detachHostRoot() error {
	if err := unix.Unmount(oldRoot, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach host root: %w", err)
	}
	return os.Remove(oldRoot)
}

// freezeSkeleton makes the root tmpfs and the empty ones, among them the
// hidden places, read-only: they were writable until now for the grants'
// mount points. The private /var/tmp stays writable.
func freezeSkeleton(hidden []string) error {
	freeze := append([]string{"/", "/run", "/home", "/root", "/mnt", "/media", "/dev"}, hidden...)
	for _, p := range freeze {
		if _, ok := tmpDirs[p]; ok {
			continue // the private /var/tmp stays writable
		}
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := setAttr(p, unix.MOUNT_ATTR_RDONLY, false); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

// mountGrants mounts the granted paths at their own place, parents first
// so that a grant inside another one lands on top, idmapped where cfg
// says. A read-only grant whose filesystem cannot idmap is mounted as it
// is (it is only less readable); a read-write one fails the idmap layer
// unless it is degraded.
func mountGrants(cfg *config, userns []*os.File) ([]grant, error) {
	grants := cfg.grants()
	sort.SliceStable(grants, func(i, j int) bool { return len(grants[i].path) < len(grants[j].path) })
	for _, g := range grants {
		var ns *os.File
		if idx, ok := cfg.IDMaps[g.path]; ok && idx >= 0 && idx < len(userns) {
			ns = userns[idx]
		}
		if err := os.MkdirAll(g.path, 0o755); err != nil {
			return nil, fmt.Errorf("mount point for %s: %w", g.path, err)
		}
		id := cfg.Identities[g.path]
		err := bindGrant(oldRoot+g.path, g.path, g.ro, ns, id)
		var ie *idmapError
		if errors.As(err, &ie) {
			switch {
			case g.ro:
				cfg.idmapSkipped = append(cfg.idmapSkipped, g.path)
			case degraded(cfg, wire.LayerIDMap):
				cfg.idmapDegraded = append(cfg.idmapDegraded, fmt.Sprintf("%s: %v", g.path, err))
			default:
				return nil, &layerFailure{wire.LayerIDMap, fmt.Errorf("mount %s: %w", g.path, err)}
			}
			err = bindGrant(oldRoot+g.path, g.path, g.ro, nil, id)
		}
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", g.path, err)
		}
	}
	return grants, nil
}

// hide covers each existing directory of paths with an empty tmpfs (the
// private one's directory for /var/tmp, see privateTmp); symlinks
// (/var/run → /run) and missing paths are skipped.
func hide(paths []string, tmp *privateTmp) error {
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		if _, ok := tmpDirs[p]; ok {
			err = tmp.bind(p)
		} else {
			err = emptyTmpfs(p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// maskedProc are /proc files that are not per PID namespace and tell a
// sandbox about the host: key descriptions of the caller's keyrings, kernel
// memory and timers, scheduler state. They are covered with /dev/null (as
// container runtimes do); missing ones are skipped.
var maskedProc = []string{"/proc/keys", "/proc/key-users", "/proc/kcore", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats", "/proc/sysrq-trigger", "/proc/kallsyms", "/proc/kmsg"}

func maskProc() error {
	for _, p := range maskedProc {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(oldRoot+"/dev/null", p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		if err := setAttr(p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}

// bindReadOnly binds a host file or directory tree read-only, nosuid, nodev.
func bindReadOnly(src, dst string, dir bool) error {
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else {
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dst, err)
	}
	if err := setAttr(dst, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, true); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// bindGrant mounts the granted host directory src at dst. The directory
// is opened without following any symlink and must be the one the host
// checked (id: device and inode), so that swapping a path component for a
// symlink, or the directory for another, between the host's check and
// this mount is refused instead of granting something else. With ns (root
// callers) the mount is idmapped so that the sandbox uid acts as the
// directory's owner.
func bindGrant(src, dst string, ro bool, ns *os.File, id [2]uint64) error {
	dir, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("open %s without following symlinks: %w (did it change after sodactl checked it?)", src, err)
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return err
	}
	if [2]uint64{st.Dev, st.Ino} != id {
		return fmt.Errorf("%s is not the directory sodactl checked (it was replaced)", src)
	}
	tree, err := unix.OpenTree(dir, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if ns != nil {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(ns.Fd())
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		if ns != nil {
			return &idmapError{fmt.Errorf("idmapped mount (does this filesystem support idmapped mounts?): %w", err)}
		}
		return fmt.Errorf("mount_setattr: %w", err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	return nil
}

// idmapError is a failure of the idmapping itself (not of the mount).
type idmapError struct{ error }

func (e *idmapError) Unwrap() error { return e.error }

func setAttr(path string, attr uint64, recursive bool) error {
	flags := 0
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, uint(flags)|unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: attr})
}

// emptyTmpfs shows dst (made if missing) as an empty directory: a small
// tmpfs, writable until the skeleton is frozen, for grants' mount points.
func emptyTmpfs(dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("soda-empty", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("hide %s: %w", dst, err)
	}
	return nil
}

// mountHome gives the sandbox its home on a tmpfs of its own, limited in
// size and inodes (not on the host's /run, which a full home would fill for
// every service), and copies into it what the host prepared in src (the
// agents' configuration files): regular files and directories only, read
// through src as checked (no symlink followed, the same directory).
// mountWorkspace mounts the sandbox's private workspace: a tmpfs of
// cfg.WorkspaceSize bytes (and one inode per wire.InodeBytes of it).
func mountWorkspace(cfg *config) error {
	if err := os.MkdirAll(wire.SandboxWorkspace, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=0755,uid=%d,gid=%d,size=%d,nr_inodes=%d", cfg.UID, cfg.GID, cfg.WorkspaceSize, inodes(cfg.WorkspaceSize))
	if err := unix.Mount("soda-workspace", wire.SandboxWorkspace, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", wire.SandboxWorkspace, err)
	}
	return nil
}

func mountHome(src string, cfg *config) error {
	if err := os.MkdirAll(wire.SandboxHome, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("mode=0700,uid=%d,gid=%d,size=%d,nr_inodes=%d", cfg.UID, cfg.GID, cfg.HomeSize, inodes(cfg.HomeSize))
	if err := unix.Mount("soda-home", wire.SandboxHome, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", wire.SandboxHome, err)
	}
	// os.Root reads below src without leaving it; the identity check
	// after the open makes sure src is still the directory the host made.
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Stat(".")
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || [2]uint64{st.Dev, st.Ino} != cfg.Identities[cfg.Home] {
		return fmt.Errorf("%s is not the directory sodactl checked (it was replaced)", src)
	}
	return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return err
		}
		dst := filepath.Join(wire.SandboxHome, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			err = os.Mkdir(dst, info.Mode().Perm())
		case d.Type().IsRegular():
			err = copyFile(root, p, dst, info.Mode().Perm())
		default:
			return nil // the host writes nothing else there
		}
		if err != nil {
			return err
		}
		return os.Lchown(dst, cfg.UID, cfg.GID)
	})
}

// copyFile copies the regular file p of root to dst.
func copyFile(root *os.Root, p, dst string, mode fs.FileMode) error {
	in, err := root.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", p, err)
	}
	return out.Close()
}

// inodes is the inode limit of a private tmpfs of size bytes.
func inodes(size int64) int64 { return max(size/wire.InodeBytes, 1024) }

// privateTmp is the sandbox's one tmpfs for temporary files, of TmpSize
// bytes (and one inode per wire.InodeBytes): /tmp, /var/tmp and /dev/shm
// are bind mounts of a directory of it each (tmpDirs), so that together
// they hold, and pin of the host's memory, at most TmpSize; each is
// nosuid, nodev, noexec and mode 1777. The tmpfs is mounted at a staging
// directory of the root until close, and lives on in its bind mounts.
type privateTmp struct{ stage string }

// tmpDirs are the places privateTmp provides, with their directory in it.
var tmpDirs = map[string]string{"/tmp": "tmp", "/var/tmp": "var-tmp", "/dev/shm": "shm"}

// tmpStage is where init mounts the private tmpfs while it builds the
// root (in the root tmpfs, which the sandbox sees read-only; removed
// before).
const tmpStage = "/.soda-tmp"

// mountPrivateTmp mounts the private tmpfs of size bytes at tmpStage,
// with a directory of mode 1777 for each of tmpDirs.
func mountPrivateTmp(size int64) (*privateTmp, error) {
	if err := os.Mkdir(tmpStage, 0o700); err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("mode=0755,size=%d,nr_inodes=%d", size, inodes(size))
	if err := unix.Mount("soda-tmp", tmpStage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return nil, fmt.Errorf("mount the private tmpfs: %w", err)
	}
	for _, d := range tmpDirs {
		p := filepath.Join(tmpStage, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(p, 0o777|os.ModeSticky); err != nil {
			return nil, err
		}
	}
	return &privateTmp{stage: tmpStage}, nil
}

// bind mounts dst's directory of the private tmpfs at dst (made if
// missing), nosuid, nodev, noexec.
func (t *privateTmp) bind(dst string) error {
	d, ok := tmpDirs[dst]
	if !ok {
		return fmt.Errorf("%s is not a private temporary directory", dst)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(filepath.Join(t.stage, d), dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount private %s: %w", dst, err)
	}
	if err := setAttr(dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
		return fmt.Errorf("mount private %s: %w", dst, err)
	}
	return nil
}

// close unmounts the staging mount and removes its directory; the bind
// mounts keep the tmpfs.
func (t *privateTmp) close() error {
	if err := unix.Unmount(t.stage, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", t.stage, err)
	}
	return os.Remove(t.stage)
}

// buildDev makes a minimal /dev: the harmless character devices bound from
// the host, a private devpts and /dev/shm (of the private tmpfs).
func buildDev(tmp *privateTmp) error {
	if err := os.Mkdir("/dev", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("soda-dev", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		dst := "/dev/" + n
		f, err := os.Create(dst)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount(oldRoot+dst, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", dst, err)
		}
		if err := setAttr(dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return err
		}
	}
	if err := os.Mkdir("/dev/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount devpts: %w", err)
	}
	if err := os.Symlink("pts/ptmx", "/dev/ptmx"); err != nil {
		return err
	}
	if err := tmp.bind("/dev/shm"); err != nil {
		return err
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, "/dev/"+name); err != nil {
			return err
		}
	}
	return nil
}

// writeResolvConf points the resolver at the sandbox's DNS sink. When the
// host's /etc/resolv.conf is a symlink into /run (systemd-resolved), the
// file is written where the link points, on the sandbox's own /run.
func writeResolvConf() error {
	const content = "# soda sandbox: no DNS; names are resolved by the egress proxy (HTTPS_PROXY)\nnameserver 127.0.0.1\noptions ndots:0 attempts:1 timeout:1\n"
	const path = "/etc/resolv.conf"
	target := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		l, err := os.Readlink(path)
		if err != nil {
			return err
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join("/etc", l)
		}
		target = filepath.Clean(l)
		if !strings.HasPrefix(target, "/run/") {
			return fmt.Errorf("%s links to %s, outside /run", path, target)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		return os.WriteFile(target, []byte(content), 0o644)
	} else if err != nil {
		return nil // no resolv.conf: the resolver's default is 127.0.0.1 too
	}
	if err := os.WriteFile("/run/soda-resolv.conf", []byte(content), 0o644); err != nil {
		return err
	}
	if err := unix.Mount("/run/soda-resolv.conf", target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", target, err)
	}
	return setAttr(target, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
}
