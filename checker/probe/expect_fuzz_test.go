package probe

import (
	"bytes"
	"regexp"
	"testing"
)

// FuzzExpectations feeds arbitrary answers to the TCP step matcher, the
// HTTP expectations and the raw-head header lookup: none may panic, and a
// TCP match must end within what was read.
func FuzzExpectations(f *testing.F) {
	f.Add([]byte("+PONG\r\n"), "+PONG\r\n", "X-Status", uint8(0))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX-Status: ok\r\n\r\nready"), "ready", "x-status", uint8(1))
	f.Add([]byte("\x4a\x00\x00\x00\x0a8.0"), `(?s)^.{3}\x00\x0a`, "", uint8(2))
	f.Add([]byte{0xff, 0xfe, 0x00}, "[", ":", uint8(2))
	f.Fuzz(func(t *testing.T, answer []byte, pattern, header string, kind uint8) {
		st := tcpStep{limit: DefaultTCPReadLimit, display: "x"}
		switch kind % 3 {
		case 0:
			if pattern == "" {
				return
			}
			st.exact = []byte(pattern)
		case 1:
			if pattern == "" {
				return
			}
			st.substr = []byte(pattern)
		default:
			re, err := regexp.Compile(pattern)
			if err != nil {
				return
			}
			st.re = re
		}
		if end, done, err := st.match(answer); done && err == nil && (end < 0 || end > len(answer)) {
			t.Fatalf("match ends at %d in %d bytes", end, len(answer))
		}
		x := &httpExpect{contains: pattern, notContains: pattern, limit: 64}
		if re, err := regexp.Compile(pattern); err == nil {
			x.re = re
			if isToken(header) {
				x.headers = []headerExpect{{name: header, re: re}}
			}
		}
		head, body, _ := bytes.Cut(answer, []byte("\r\n\r\n"))
		_ = x.check(headValues(head), body[:min(len(body), x.limit)])
		_, _ = parseStatusRange(pattern)
	})
}
