package probe

import (
	"bufio"
	"bytes"
	"strings"
)

// Parsing of the lean prober's responses: the head (status line and
// header), the chunked body's trailer, and the header values the fast path
// accepts. What it does not take, net/http parses (see parseHead).

// readTrailer reads the trailer section after a chunked body, through its
// final blank line, and reports whether it was read whole.
func readTrailer(br *bufio.Reader) bool {
	for total := 0; total < leanBufferSize; {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return false
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			return true
		}
		total += len(line)
	}
	return false
}

// peekHead returns the response head at the start of br's buffer: the
// status line and header lines through the blank line that ends them,
// without consuming them. It reads more from the connection as needed.
// When the head does not fit in br's buffer, complete is false. On an
// error, n is how many bytes of a response have arrived.
func peekHead(br *bufio.Reader) (head []byte, complete bool, n int, err error) {
	from := 0
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := headEnd(buf, from); i >= 0 {
			return buf[:i], true, len(buf), nil
		}
		if len(buf) == br.Size() {
			return buf, false, len(buf), nil
		}
		from = max(0, len(buf)-2)
		if _, err := br.Peek(len(buf) + 1); err != nil {
			return nil, false, br.Buffered(), err
		}
	}
}

// headEnd returns the length of the head in buf, through the blank line
// ("\r\n" or "\n") that ends it, or -1 when buf holds no blank line.
// Blank lines start at from or later.
func headEnd(buf []byte, from int) int {
	for i := from; i < len(buf); i++ {
		if buf[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(buf) && buf[i+1] == '\n':
			return i + 2
		case i+2 < len(buf) && buf[i+1] == '\r' && buf[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

// leanResponse is what the lean parser takes from a response head.
type leanResponse struct {
	code      int
	keepAlive bool  // the response lets the connection serve another request
	chunked   bool  // Transfer-Encoding: chunked
	length    int64 // Content-Length, or -1 when none
}

// parseHead parses a response head in the common, unambiguous form: an
// "HTTP/1.0" or "HTTP/1.1" status line with a three-digit code, header
// lines "Name: value" with a token name, at most one Content-Length of
// digits, and no Transfer-Encoding other than a lone "chunked" in HTTP/1.1.
// For anything else it returns ok false, and net/http parses the head, so
// that what passes, what fails and what the error says stay net/http's.
func parseHead(head []byte) (r leanResponse, ok bool) {
	line, rest, _ := bytes.Cut(head, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	// "HTTP/1.1 200 OK", "HTTP/1.1 200"
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' {
		return r, false
	}
	minor := line[7] - '0'
	if len(line) > 12 && line[12] != ' ' {
		return r, false
	}
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return r, false
		}
		r.code = r.code*10 + int(d-'0')
	}
	r.length = -1
	var sawClose, sawKeepAlive, sawLength, sawTE bool
	for {
		var hl []byte
		hl, rest, _ = bytes.Cut(rest, []byte("\n"))
		hl = bytes.TrimSuffix(hl, []byte("\r"))
		if len(hl) == 0 {
			break
		}
		name, value, found := bytes.Cut(hl, []byte(":"))
		if !found || !isToken(string(name)) || !plainHeaderValue(value) {
			return r, false
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if sawLength || len(value) == 0 || len(value) > 18 {
				return r, false
			}
			sawLength = true
			r.length = 0
			for _, d := range value {
				if d < '0' || d > '9' {
					return r, false
				}
				r.length = r.length*10 + int64(d-'0')
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			if sawTE || minor == 0 || !asciiEqualFold(value, "chunked") {
				return r, false
			}
			sawTE = true
			r.chunked = true
		case asciiEqualFold(name, "Connection"):
			for tok := range strings.SplitSeq(string(value), ",") {
				tok = strings.Trim(tok, " \t")
				sawClose = sawClose || asciiEqualFold([]byte(tok), "close")
				sawKeepAlive = sawKeepAlive || asciiEqualFold([]byte(tok), "keep-alive")
			}
		}
	}
	if sawTE && sawLength {
		return r, false
	}
	// As net/http's shouldClose: HTTP/1.0 closes unless asked to keep alive.
	r.keepAlive = !sawClose && (minor == 1 || sawKeepAlive) && r.code >= 200
	return r, true
}

// plainHeaderValue reports whether v holds only bytes net/textproto takes
// in a header value as they are: tab, visible ASCII, space, and bytes of
// 0x80 and above.
func plainHeaderValue(v []byte) bool {
	for _, c := range v {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// asciiEqualFold reports whether b equals s, ignoring ASCII case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
