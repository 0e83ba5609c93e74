package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// A leanProber serves plain http:// probes without net/http's Transport:
// it keeps one connection to its target, writes request bytes formatted
// once by New, and reads the response head itself from a small buffer. A
// probe through net/http costs a pooled connection with two goroutines
// (and, once the fleet outgrows the pool, a new TCP connection every time);
// this one costs a write and a read or two on a connection it already has.
//
// It answers exactly as the net/http prober would: the request bytes are
// net/http's own (Request.Write of the same request), a response head it
// does not understand completely (odd framing, malformed lines, a head
// larger than its buffer) is handed to
// http.ReadResponse on the same buffered bytes, and its errors read like
// net/http's ("Get \"url\": ..."), so Describe says the same. The body is
// read as the net/http prober reads it: at most maxBodyBytes+1 bytes,
// whatever is read (or fails to be) does not change the result, and only a
// body read to its end leaves the connection reusable.
//
// Probe is safe for concurrent use: each probe takes the kept connection
// (or dials a new one when another probe holds it) and puts it back when
// the response allows keep-alive and no connection is kept yet, so at most
// one idle connection is kept. Close closes it.
//
// A fleet has one leanProber per target, so it keeps only what a probe
// reads: the request's bytes, not the *http.Request and header map they
// were formatted from (the slow path builds the little it needs, see
// readRequest), or for a plain request where its pieces are in the URL
// (see http_request.go), and strings shared with the spec where they are
// equal.
type leanProber struct {
	factory *Factory
	addr    string  // host:port to dial, as net/http's canonicalAddr
	req     []byte  // the request, as net/http writes it; nil when plain
	head    bool    // a HEAD request (else GET): responses have no body
	closed  bool    // guarded by mu (here in head's padding)
	ip4     [4]byte // addr's IPv4 address and port, parsed once (in head's padding); port 0 when addr is none
	port    uint16
	urlText string      // the URL in errors, as net/http's client shows it
	expect  *httpExpect // nil: any 2xx passes

	mu    sync.Mutex   // protects idle and closed
	idle  *leanConn    // the kept connection, nil when none is idle; set with setIdle
	kept  atomic.Bool  // idle != nil, for KeepsConn to read without mu
	plain plainRequest // where a plain request's pieces are in urlText; zero when req holds it (in kept's padding)

	async *asyncProbe // the probe ProbeAsync started, while it runs; guarded by the async loop's mutex

	lost atomic.Pointer[func(string)] // told of a kept connection the peer ended; see WatchConn

	period proberPeriod // how often it probes: whether it may keep a connection (keeprank.go)
}

// leanIdleTimeout is how long a kept connection may sit unused before a
// probe dials afresh instead of trying it; servers close idle connections
// (nginx after 75s, Apache after 5s), and a connection past this age would
// likely cost a failed write and a redial.
const leanIdleTimeout = 90 * time.Second

// maxResponseHeaderBytes bounds a response head (including any 1xx heads
// before it), as net/http's Transport does by default.
const maxResponseHeaderBytes = 10 << 20

// leanBufferSize is the read buffer of a kept connection: a response head
// that does not fit is parsed by http.ReadResponse instead.
const leanBufferSize = 1 << 10

// leanHeaderExcluded lists request headers that change how a connection or
// a message is framed; net/http gives them meaning beyond their bytes, so a
// spec that sets one is served by net/http.
var leanHeaderExcluded = map[string]bool{
	"Connection":        true,
	"Content-Length":    true,
	"Expect":            true,
	"Keep-Alive":        true,
	"Proxy-Connection":  true,
	"Te":                true,
	"Trailer":           true,
	"Transfer-Encoding": true,
	"Upgrade":           true,
}

// newLeanProber returns a leanProber for the request net/http would send
// for p, or nil when the lean path cannot send exactly that request (not
// plain http, a method other than GET or HEAD, a host name beyond ASCII, a
// framing header). The prober keeps no reference to p, but shares its
// compiled expectations.
func newLeanProber(f *Factory, p *httpProber) *leanProber {
	u, err := url.Parse(p.url)
	if err != nil || u.Scheme != "http" {
		return nil
	}
	if p.method != http.MethodGet && p.method != http.MethodHead {
		return nil // readRequest knows only these two
	}
	host := u.Hostname()
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			return nil // net/http sends it in punycode
		}
	}
	for name := range p.header {
		if leanHeaderExcluded[name] {
			return nil
		}
	}
	req, err := http.NewRequest(p.method, p.url, nil)
	if err != nil {
		return nil
	}
	req.Header = p.header.Clone()
	if p.host != "" {
		req.Host = p.host
	}
	// What http.Client.send adds for a URL with user information.
	if u.User != nil && req.Header.Get("Authorization") == "" {
		password, _ := u.User.Password()
		req.SetBasicAuth(u.User.Username(), password)
	}
	var buf bytes.Buffer
	if err := req.Write(&buf); err != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	addr := net.JoinHostPort(host, port)
	if addr == u.Host {
		addr = u.Host // a piece of p.url: no copy of its own
	}
	urlText := u.String()
	if _, ok := u.User.Password(); ok {
		urlText = strings.Replace(urlText, u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	if urlText == p.url {
		urlText = p.url // the spec's string, which its target keeps anyway
	}
	lp := &leanProber{
		factory: f,
		addr:    addr,
		head:    p.method == http.MethodHead,
		urlText: urlText,
		expect:  p.expect,
	}
	if pr, ok := splitPlain(urlText, lp.head, buf.Bytes()); ok {
		lp.plain = pr
	} else {
		lp.req = bytes.Clone(buf.Bytes()) // not the buffer's spare capacity
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Is4() && ap.Port() != 0 {
		lp.ip4, lp.port = ap.Addr().As4(), ap.Port()
	}
	return lp
}

// dialAddr returns the IP address and port a dial connects to, with no
// zone; ok is false when addr is a host name, or has a zone. An IPv4
// address is parsed once, when the prober is made: every dialled probe
// asks.
func (p *leanProber) dialAddr() (addr netip.AddrPort, ok bool) {
	if p.port != 0 {
		return netip.AddrPortFrom(netip.AddrFrom4(p.ip4), p.port), true
	}
	addr, err := netip.ParseAddrPort(p.addr)
	return addr, err == nil && addr.Addr().Zone() == ""
}

// op is the operation errors name, as net/http's client does: "Get" or
// "Head".
func (p *leanProber) op() string {
	if p.head {
		return "Head"
	}
	return "Get"
}

// readRequest returns the request http.ReadResponse is given on the slow
// path. ReadResponse consults only its method (a HEAD response has no
// body), so that is all it holds: keeping the whole request, with its URL
// and header map, cost every target about a kilobyte for the rare response
// the lean parser leaves to net/http.
func (p *leanProber) readRequest() *http.Request {
	if p.head {
		return &http.Request{Method: http.MethodHead}
	}
	return &http.Request{Method: http.MethodGet}
}

// leanConn is one connection of a leanProber, with its read buffer while
// a probe reads through it.
type leanConn struct {
	conn net.Conn // nil while registered with the async loop (see asyncConn)
	// br is the read buffer of Probe's code, taken from leanReaders for
	// the probe and given back when the connection is kept with nothing
	// buffered: a kept connection's probes are read by the asynchronous
	// loop, into buffers of its own, so between probes it holds none.
	br        *bufio.Reader
	readLimit int64     // bytes Read may still return; bounds the head
	idleSince time.Time // when it was last put back
	expire    func()    // sets a deadline in the past; made once per conn

	// pending holds bytes of a response that an asynchronous probe read
	// before handing the connection to Probe's code, and pendingErr the
	// error that ended its reading; Read returns them first.
	pending    []byte
	pendingErr error
	// async is the connection's registration with the async loop; nil
	// until an asynchronous probe first uses it.
	async *asyncConn
}

// Read reads from the connection within readLimit, so that br, and
// http.ReadResponse on it, never reads more of a head than
// maxResponseHeaderBytes.
func (c *leanConn) Read(p []byte) (int, error) {
	if c.readLimit <= 0 {
		return 0, fmt.Errorf("read limit of %d bytes exhausted", maxResponseHeaderBytes)
	}
	if int64(len(p)) > c.readLimit {
		p = p[:c.readLimit]
	}
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.readLimit -= int64(n)
		return n, nil
	}
	if err := c.pendingErr; err != nil {
		c.pendingErr = nil
		return 0, err
	}
	n, err := c.conn.Read(p)
	c.readLimit -= int64(n)
	return n, err
}

// close closes the connection and ends its registration with the async
// loop.
func (c *leanConn) close() {
	if c.conn == nil {
		c.closeKept(false)
		return
	}
	if c.async != nil {
		c.async.forget()
	}
	_ = c.conn.Close()
}

// reset closes a connection that is not kept after a complete exchange
// with a reset (SO_LINGER 0), as HAProxy ends its checks, so that it
// leaves nothing in TIME_WAIT (see asyncConn.closeRaw).
func (c *leanConn) reset() {
	if c.conn == nil {
		c.closeKept(true)
		return
	}
	if l, ok := c.conn.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
	c.close()
}

// leanReaders are the read buffers of leanConns, shared: only a probe in
// Probe's code holds one.
var leanReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, leanBufferSize) }}

// reader returns c's read buffer, taking one when it has none.
func (c *leanConn) reader() *bufio.Reader {
	if c.br == nil {
		c.br = leanReaders.Get().(*bufio.Reader)
		c.br.Reset(c)
	}
	return c.br
}

// dropReader gives c's read buffer back when it holds no byte; one that
// holds some stays, so that the next probe's take sees them.
func (c *leanConn) dropReader() {
	if c.br != nil && c.br.Buffered() == 0 {
		c.br.Reset(nil)
		leanReaders.Put(c.br)
		c.br = nil
	}
}

// aLongTimeAgo is a deadline that has passed: setting it makes blocked
// reads and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// Probe sends the request on the kept connection, or on a new one, and
// checks the status.
func (p *leanProber) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return p.urlError(err)
	}
	p.period.started(&p.factory.rank, time.Now())
	c := p.take()
	return p.probeOn(ctx, c, false, c != nil)
}

// probeOn runs the probe on c, or on a new connection when c is nil;
// written says the request is already on c (an asynchronous probe handed c
// over), reused that c was kept from an earlier probe: a kept connection
// that fails before any byte of a response arrives is replaced by a new
// one, once.
func (p *leanProber) probeOn(ctx context.Context, c *leanConn, written, reused bool) error {
	for {
		if c != nil && c.attach() != nil {
			// The kept connection could not be made a net.Conn again
			// (it is closed): the probe dials, as it would after a
			// failed write on it.
			c, written, reused = nil, false, false
		}
		if c == nil {
			var err error
			if c, err = p.dial(ctx); err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return p.urlError(cerr)
				}
				return p.urlError(err)
			}
		}
		verdict, keep, received, err := p.roundTrip(ctx, c, written)
		written = false
		if err != nil {
			c.close()
			// A kept connection the server closed (or reset) while it was
			// idle fails before any byte of a response arrives: try once
			// more on a new one, as net/http does for idempotent requests.
			if reused && !received && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				p.lostInUse(err)
				c, reused = nil, false
				continue
			}
			return err
		}
		if keep {
			p.putBack(c)
		} else {
			c.close()
		}
		return verdict
	}
}

// verdict is a probe's result for an answer: its final status code, its
// header's values (nil when no expectation reads them), what was read of
// its body (when an expectation reads it) and the error that cut the body
// short before the expectations' limit, if any.
func (p *leanProber) verdict(code int, values func(string) []string, body []byte, bodyErr error) error {
	if !p.expect.statusPasses(code) {
		return &StatusError{Code: code}
	}
	if p.expect == nil {
		return nil
	}
	if bodyErr != nil {
		return bodyErr
	}
	return p.expect.check(values, body)
}

// headerValues returns a lookup of head's header values when p's
// expectations read them, else nil. It copies what it needs of head.
func (p *leanProber) headerValues(head []byte) func(string) []string {
	if p.expect == nil || len(p.expect.headers) == 0 {
		return nil
	}
	return headValues(bytes.Clone(head))
}

// KeepsConn reports whether the next probe will find a kept connection
// (which it may still find too old to use): the checker counts a probe
// that dials as a heavier one when it batches probe starts. It is safe
// for concurrent use and does not block.
func (p *leanProber) KeepsConn() bool { return p.kept.Load() }

// setIdle sets the kept connection, nil for none; p.mu must be held.
func (p *leanProber) setIdle(c *leanConn) {
	p.idle = c
	p.kept.Store(c != nil)
}

// take returns the kept connection, or nil when there is none (or it has
// been idle too long, and is closed).
func (p *leanProber) take() *leanConn {
	p.mu.Lock()
	c := p.idle
	p.setIdle(nil)
	p.mu.Unlock()
	if c != nil {
		p.factory.unkeep()
	}
	// Bytes that arrived on the idle connection are no answer to the next
	// request: net/http drops such a connection too.
	if c != nil && (c.br != nil && c.br.Buffered() > 0 || time.Since(c.idleSince) > leanIdleTimeout) {
		c.close()
		return nil
	}
	return c
}

// putBack keeps c for the next probe, or closes it when the prober is
// closed, already keeps one, or the Factory keeps as many as it may.
func (p *leanProber) putBack(c *leanConn) {
	c.dropReader()
	c.idleSince = time.Now()
	if p.lost.Load() != nil {
		p.watchIdle(c) // before it is shared: register sets c.async
	}
	keep := p.factory.rank.mayKeep(&p.period, p.factory.keptMax, c.idleSince)
	p.mu.Lock()
	if p.closed || p.idle != nil || !keep || !p.factory.keep() {
		p.mu.Unlock()
		c.reset()
		return
	}
	p.setIdle(c)
	p.mu.Unlock()
}

// dial opens a connection through the Factory's guarded dialer.
func (p *leanProber) dial(ctx context.Context) (*leanConn, error) {
	conn, err := p.factory.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	c := &leanConn{conn: conn}
	c.expire = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	return c, nil
}

// roundTrip writes the request on c, unless written, and reads the
// response: the probe's verdict on it, whether c may serve another
// request, and whether any byte of a response arrived. The error, when not
// nil, is the one to return.
func (p *leanProber) roundTrip(ctx context.Context, c *leanConn, written bool) (verdict error, keep, received bool, err error) {
	deadline, _ := ctx.Deadline() // the zero time means none
	if err := c.conn.SetDeadline(deadline); err != nil {
		return nil, false, false, p.urlError(err)
	}
	stop := context.AfterFunc(ctx, c.expire)
	defer func() {
		if !stop() {
			// The context ended during the probe and c's deadline has
			// been (or is being) moved to the past: do not keep it.
			keep = false
		}
	}()

	if !written {
		if _, err := c.conn.Write(p.request()); err != nil {
			return nil, false, false, p.ioError(ctx, err)
		}
		c.readLimit = maxResponseHeaderBytes
	}
	c.reader() // slowResponse, brokenHead and readBody read through c.br too
	// Once an informational response came, the answer has begun: its end
	// is a broken head, not a connection that failed before any answer.
	answered := false
	for {
		head, complete, n, err := peekHead(c.br)
		if err != nil {
			if n == 0 && !answered && c.readLimit > 0 {
				if errors.Is(err, io.EOF) {
					return nil, false, false, p.urlError(io.EOF)
				}
				return nil, false, false, p.ioError(ctx, err)
			}
			return nil, false, true, p.brokenHead(ctx, c, err)
		}
		resp, ok := parseHead(head)
		if !complete || !ok {
			verdict, keep, err := p.slowResponse(ctx, c)
			return verdict, keep, true, err
		}
		if resp.code >= 100 && resp.code <= 199 && resp.code != http.StatusSwitchingProtocols {
			_, _ = c.br.Discard(len(head))
			answered = true
			continue // informational: the final response follows
		}
		values := p.headerValues(head)
		_, _ = c.br.Discard(len(head))
		c.readLimit = 1<<63 - 1
		sink := newBodySink(p.expect)
		keep, bodyErr := p.readBody(c, resp, sink)
		if bodyErr != nil {
			bodyErr = bodyError(ctx, bodyErr)
		}
		return p.verdict(resp.code, values, sink.bytes(), bodyErr), keep, true, nil
	}
}

// slowResponse reads the response with http.ReadResponse from c's
// buffered bytes onwards, for a head the lean parser leaves to net/http.
func (p *leanProber) slowResponse(ctx context.Context, c *leanConn) (verdict error, keep bool, err error) {
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(c.br, p.readRequest())
		if err != nil {
			return nil, false, p.readError(ctx, c, err)
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	c.readLimit = 1<<63 - 1
	body := resp.Body
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// net/http hands the connection itself over as the body.
		body = io.NopCloser(c.br)
	}
	// Under the cap without an error, the copy ended at the body's end.
	bodyCap := readCap(p.expect)
	sink := newBodySink(p.expect)
	n, err := io.Copy(sinkWriter(sink), io.LimitReader(body, bodyCap+1))
	keep = err == nil && n <= bodyCap && !resp.Close && resp.StatusCode >= 200
	var bodyErr error
	if err != nil && sink != nil && len(sink.buf) < sink.limit {
		bodyErr = bodyError(ctx, err)
	}
	return p.verdict(resp.StatusCode, resp.Header.Values, sink.bytes(), bodyErr), keep, nil
}

// brokenHead returns the error for a response head cut short by err
// after some bytes of it arrived: what http.ReadResponse makes of those
// bytes followed by err, as net/http reads them.
func (p *leanProber) brokenHead(ctx context.Context, c *leanConn, err error) error {
	got, _ := c.br.Peek(c.br.Buffered())
	got = bytes.Clone(got)
	replay := bufio.NewReader(io.MultiReader(bytes.NewReader(got), errorReader{err}))
	_, rerr := http.ReadResponse(replay, p.readRequest())
	if rerr == nil {
		rerr = io.ErrUnexpectedEOF // not reached: the head had no end
	}
	return p.readError(ctx, c, rerr)
}

// errorReader returns err from every Read.
type errorReader struct{ err error }

func (r errorReader) Read([]byte) (int, error) { return 0, r.err }

// readError turns an error reading a response head into net/http's.
func (p *leanProber) readError(ctx context.Context, c *leanConn, err error) error {
	if cerr := ctxError(ctx, err); cerr != nil {
		return p.urlError(cerr)
	}
	if c.readLimit <= 0 {
		return p.urlError(fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", maxResponseHeaderBytes))
	}
	return p.urlError(fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err))
}

// bodyError turns an error reading the body, which fails a probe that
// checks the body, into the net/http prober's.
func bodyError(ctx context.Context, err error) error {
	if cerr := ctxError(ctx, err); cerr != nil {
		err = cerr
	}
	return withContext(ctx, fmt.Errorf("reading the body: %w", err))
}

// ioError turns an error writing the request, or reading before any byte
// of a response arrived, into net/http's.
func (p *leanProber) ioError(ctx context.Context, err error) error {
	if cerr := ctxError(ctx, err); cerr != nil {
		return p.urlError(cerr)
	}
	return p.urlError(err)
}

// ctxError returns ctx's error when err is what the connection returns
// once the deadline taken from ctx has passed or ctx was cancelled, and
// nil otherwise. The deadline can pass just before ctx notices.
func ctxError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return nil
}

// urlError wraps err as http.Client does.
func (p *leanProber) urlError(err error) error {
	return &url.Error{Op: p.op(), URL: p.urlText, Err: err}
}

// readBody reads the body as framed by resp, up to the cap (maxBodyBytes,
// or the expectations' limit when larger) and one byte, into sink (nil:
// discarded), and reports whether the connection may serve another
// request: the body ended within the cap and the response allows
// keep-alive. err is the error that ended reading before sink's limit, when
// sink is not nil; reading errors otherwise only cost the connection.
func (p *leanProber) readBody(c *leanConn, resp leanResponse, sink *bodySink) (keep bool, err error) {
	noBody := p.head || resp.code == http.StatusNoContent || resp.code == http.StatusNotModified
	bodyCap := readCap(p.expect)
	w := sinkWriter(sink)
	cut := func(err error) error { // the error that matters to sink
		if err == nil || sink == nil || len(sink.buf) >= sink.limit {
			return nil
		}
		return err
	}
	switch {
	case resp.code == http.StatusSwitchingProtocols:
		// net/http hands the connection over as the body.
		_, err := io.Copy(w, io.LimitReader(c.br, bodyCap+1))
		return false, cut(err)
	case noBody:
		return resp.keepAlive, nil
	case resp.chunked:
		body := httputil.NewChunkedReader(c.br)
		n, err := io.Copy(w, io.LimitReader(body, bodyCap+1))
		if err != nil || n > bodyCap { // else the copy ended at the last chunk
			return false, cut(err)
		}
		return readTrailer(c.br) && resp.keepAlive, nil
	case resp.length >= 0:
		if sink == nil {
			if resp.length > bodyCap+1 {
				return false, nil // cut off at the cap: the connection goes
			}
			n, err := c.br.Discard(int(resp.length))
			return err == nil && int64(n) == resp.length && resp.keepAlive, nil
		}
		n, err := io.Copy(w, io.LimitReader(c.br, min(resp.length, bodyCap+1)))
		if err == nil && n < min(resp.length, bodyCap+1) {
			err = io.ErrUnexpectedEOF
		}
		return err == nil && n == resp.length && resp.keepAlive, cut(err)
	default:
		// Delimited by the end of the connection.
		_, err := io.Copy(w, io.LimitReader(c.br, bodyCap+1))
		return false, cut(err)
	}
}

// Close closes the kept connection and ends an asynchronous probe in
// flight; other probes in flight close their connections when they end. Probes after Close still work, each on a connection of its
// own that it closes. Close is idempotent and always returns nil.
func (p *leanProber) Close() error {
	p.CancelAsync() // its result is no longer wanted
	p.mu.Lock()
	p.closed = true
	c := p.idle
	p.setIdle(nil)
	p.mu.Unlock()
	p.factory.forget(p)
	if c != nil {
		p.factory.unkeep()
		c.close()
	}
	return nil
}

// closeIdle closes the kept connection, leaving the prober open.
func (p *leanProber) closeIdle() {
	p.mu.Lock()
	c := p.idle
	p.setIdle(nil)
	p.mu.Unlock()
	if c != nil {
		p.factory.unkeep()
		c.close()
	}
}
