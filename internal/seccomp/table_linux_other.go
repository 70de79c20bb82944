//go:build linux && !amd64 && !arm64

package seccomp

// nativeArch reports that this architecture has no syscall table.
func nativeArch() (*archInfo, error) {
	return nil, ErrUnsupportedArch
}
