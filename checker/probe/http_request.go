package probe

import "strings"

// A plain request is the one net/http writes for a GET or HEAD of an
// http:// URL whose spec sets no header of its own:
//
//	GET /healthz HTTP/1.1\r\nHost: 10.0.0.7:8080\r\nUser-Agent: pulse-probe/1\r\n\r\n
//
// Its host and path are pieces of the URL a lean prober keeps for its
// errors, so the prober keeps where they end instead of the request's
// bytes (80 bytes a target and more), and sends it from its pieces (one
// writev on the async loop's sockets). Any other request keeps its bytes.
const (
	plainScheme = len("http://")
	plainMid    = " HTTP/1.1\r\nHost: "
	plainTail   = "\r\nUser-Agent: " + userAgent + "\r\n\r\n"
)

// plainRequest holds where a plain request's pieces end in the prober's
// URL: its host from plainScheme to hostEnd, its path from hostEnd to
// pathEnd. The zero value says the request is not plain. (Four bytes, in
// the prober's padding: MaxURLLen fits in a uint16.)
type plainRequest struct {
	hostEnd, pathEnd uint16
}

// splitPlain returns the plain request of a GET (or HEAD, head) of
// urlText if it is req, as net/http wrote it, and false if it is not.
func splitPlain(urlText string, head bool, req []byte) (plainRequest, bool) {
	if len(urlText) > MaxURLLen || len(urlText) <= plainScheme {
		return plainRequest{}, false
	}
	rest := urlText[plainScheme:]
	hostEnd := strings.IndexAny(rest, "/?#")
	if hostEnd <= 0 || rest[hostEnd] != '/' {
		return plainRequest{}, false // no path of its own: net/http sends "/"
	}
	pathEnd := strings.IndexByte(rest, '#')
	if pathEnd < 0 {
		pathEnd = len(rest)
	}
	pr := plainRequest{hostEnd: uint16(plainScheme + hostEnd), pathEnd: uint16(plainScheme + pathEnd)}
	if string(pr.append(nil, urlText, head)) != string(req) {
		return plainRequest{}, false
	}
	return pr, true
}

func plainMethod(head bool) string {
	if head {
		return "HEAD "
	}
	return "GET "
}

// pieces returns the request's pieces, in order, from urlText.
func (pr plainRequest) pieces(urlText string, head bool) [5]string {
	return [5]string{plainMethod(head), urlText[pr.hostEnd:pr.pathEnd], plainMid, urlText[plainScheme:pr.hostEnd], plainTail}
}

// append appends the request to dst.
func (pr plainRequest) append(dst []byte, urlText string, head bool) []byte {
	for _, s := range pr.pieces(urlText, head) {
		dst = append(dst, s...)
	}
	return dst
}

// requestLen returns the length of p's request.
func (p *leanProber) requestLen() int {
	if p.plain.hostEnd == 0 {
		return len(p.req)
	}
	return len(plainMethod(p.head)) + int(p.plain.pathEnd-p.plain.hostEnd) + len(plainMid) +
		int(p.plain.hostEnd) - plainScheme + len(plainTail)
}

// request returns p's request's bytes: made anew for a plain request, for
// the slow path and tests.
func (p *leanProber) request() []byte {
	if p.plain.hostEnd == 0 {
		return p.req
	}
	return p.plain.append(make([]byte, 0, p.requestLen()), p.urlText, p.head)
}
