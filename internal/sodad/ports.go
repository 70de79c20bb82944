package sodad

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procNetTCP is the kernel's table of this network namespace's TCP
// sockets (sodad's: the host's).
const procNetTCP = "/proc/net/tcp"

// ownsLoopbackListener checks that a socket of uid listens on
// 127.0.0.1:port, so that a per-run MCP server granted to uid's sandbox
// is uid's own and not another user's service.
func ownsLoopbackListener(uid uint32, port uint16) error {
	f, err := os.Open(procNetTCP)
	if err != nil {
		return fmt.Errorf("port %d: cannot check who listens on it: %w", port, err)
	}
	defer f.Close()
	owners, err := loopbackListeners(bufio.NewScanner(f), port)
	if err != nil {
		return fmt.Errorf("port %d: %s: %w", port, procNetTCP, err)
	}
	if len(owners) == 0 {
		return fmt.Errorf("port %d: nothing listens on 127.0.0.1:%d", port, port)
	}
	for _, o := range owners {
		if o != uid {
			return fmt.Errorf("port %d: the listener on 127.0.0.1:%d is uid %d's, not yours (%d)", port, port, o, uid)
		}
	}
	return nil
}

// loopbackListeners returns the uids of the sockets listening on
// 127.0.0.1:port in a /proc/net/tcp table.
func loopbackListeners(sc *bufio.Scanner, port uint16) ([]uint32, error) {
	var loop [4]byte
	binary.NativeEndian.PutUint32(loop[:], binary.BigEndian.Uint32([]byte{127, 0, 0, 1}))
	want := strings.ToUpper(hex.EncodeToString(loop[:])) + fmt.Sprintf(":%04X", port)
	var owners []uint32
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue // the header
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		if f[1] != want || f[3] != "0A" { // local address, state LISTEN
			continue
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("uid %q: %w", f[7], err)
		}
		owners = append(owners, uint32(uid))
	}
	return owners, sc.Err()
}
