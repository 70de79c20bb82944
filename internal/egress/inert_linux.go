package egress

import (
	"fmt"
	"strings"
)

// Inert renders text that came from inside the sandbox (a request line, a
// header value, a DNS name) so that it is harmless wherever an audit record
// ends up: a JSON file, the journal, a terminal, a log appended to a shell
// script. Letters, digits, space and ._:/@+=,- are kept; every other byte,
// quotes, $, backquotes, backslashes, brackets, control and non-ASCII bytes
// among them, becomes \xHH. At most max bytes of s are rendered; a longer s
// ends in "...(+N bytes)".
func Inert(s string, max int) string {
	cut := 0
	if len(s) > max {
		s, cut = s[:max], len(s)-max
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if inertByte(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	if cut > 0 {
		fmt.Fprintf(&b, "...(+%d bytes)", cut)
	}
	return b.String()
}

func inertByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte(" ._:/@+=,-", c) >= 0
}
