package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkRelayThroughput measures one-way bulk throughput to a loopback
// sink, directly and through relay and proxy (sandbox TCP -> relay ->
// socketpair -> proxy -> TCP). Compare the MB/s of the two.
func BenchmarkRelayThroughput(b *testing.B) {
	const chunk = 1 << 20
	s := newStack(b)
	for _, mode := range []string{"direct", "relay"} {
		b.Run(mode, func(b *testing.B) {
			var c net.Conn
			var br *bufio.Reader
			if mode == "direct" {
				var err error
				if c, err = net.Dial("tcp4", s.sink); err != nil {
					b.Fatal(err)
				}
				br = bufio.NewReader(c)
			} else {
				c, br = s.connect(b, s.sink)
			}
			defer c.Close()
			buf := make([]byte, chunk)
			b.SetBytes(chunk)
			b.ResetTimer()
			for range b.N {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			c.(*net.TCPConn).CloseWrite()
			line, err := br.ReadString('\n')
			b.StopTimer()
			if n, _ := strconv.Atoi(strings.TrimSpace(line)); err != nil || n != b.N*chunk {
				b.Fatalf("sink got %q, %v; want %d", line, err, b.N*chunk)
			}
		})
	}
}

// BenchmarkRelayConnect measures connection setup plus one 1-byte round
// trip: directly, through the relay's MCP port (no CONNECT) and through
// the relay's CONNECT port (one more round trip for the request).
func BenchmarkRelayConnect(b *testing.B) {
	s := newStack(b)
	one := []byte{'x'}
	for _, mode := range []string{"direct", "relay-mcp", "relay-connect"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				var c net.Conn
				var err error
				var r io.Reader
				switch mode {
				case "direct":
					c, err = net.Dial("tcp4", s.echo)
					r = c
				case "relay-mcp":
					c, err = net.Dial("tcp4", s.mcpAddr)
					r = c
				case "relay-connect":
					c, err = net.Dial("tcp4", s.proxyAddr)
					if err == nil {
						fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", s.echo)
						br := bufio.NewReader(c)
						r = br
						var line string
						line, err = br.ReadString('\n')
						if err == nil && !strings.HasPrefix(line, "HTTP/1.1 200") {
							err = fmt.Errorf("status line %q", line)
						}
						if err == nil {
							_, err = br.ReadString('\n')
						}
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(r, one); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
