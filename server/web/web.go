// Package web serves pulsed's HTTP listener: Prometheus metrics at
// /metrics, a live status page at /, its data at /api/targets and its event
// feed at /events, and pulsed's own liveness and readiness at /healthz and
// /readyz.
//
// It reads the checker through its public methods only (List, Status,
// Watch, Watchers) and, for the page's strip of recent results, an Observer
// the checker was given.
//
// With tokens (Config.Tokens) it guards itself as the gRPC API does: every
// path but /healthz, /readyz and the page's static shell needs an
// "Authorization: Bearer <token>" header, of the read role, and /backup of
// the write role.
package web

import (
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/server"
)

//go:embed static
var static embed.FS

// Config configures NewHandler. Checker is required; every other field is
// optional.
type Config struct {
	// Checker is the checker the page, the feed and the API show.
	Checker *checker.Checker
	// Gatherer is what /metrics serves. If nil, /metrics answers 404.
	Gatherer prometheus.Gatherer
	// Observer supplies the recent results per target (the page's strip and
	// the feed's "results" events). If nil, targets have no recent results
	// and the feed sends no "results" events.
	Observer *Observer
	// Ready says whether pulsed is ready to serve: nil means ready, an error
	// says why not, and /readyz answers 503 with it. If nil, /readyz answers
	// 200 while the handler exists.
	Ready func() error
	// Live says whether pulsed is live (makes progress): nil means live,
	// an error says what stalled, and /healthz answers 503 with it. If nil,
	// /healthz answers 200 while the handler exists.
	Live func() error
	// Logger receives errors of the handler itself. If nil, nothing is
	// logged.
	Logger *slog.Logger
	// ResultsInterval is how often the event feed sends the new results of
	// the targets it names. If 0, one second.
	ResultsInterval time.Duration
	// ProgressInterval is how long the event feed may stay idle before it
	// sends a progress event with the current revision (which also keeps
	// proxies from closing it). If 0, 15 seconds.
	ProgressInterval time.Duration
	// Backup takes a consistent copy of the store for GET /backup, which
	// streams it with its Content-Length, one backup at a time (another
	// request meanwhile gets 503); a failure to take it is a 500 that says
	// why. It is called from the request's goroutine. If nil (no store),
	// /backup answers 404.
	Backup func() (Snapshot, error)
	// WriteTimeout bounds each write of an answer to its client (a backup,
	// an event feed, any page): a client that does not take a write's
	// bytes within it is cut off (a backup's body stays short of its
	// Content-Length). If not positive, DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Tokens, if not nil, guard every path but /healthz, /readyz and the
	// status page's static shell (its HTML, script and style, which hold no
	// data): a request needs "Authorization: Bearer <token>" of the read
	// role, and /backup of the write role; else 401 (with
	// WWW-Authenticate: Bearer) or 403. If nil, every path is open.
	Tokens *server.Tokens
	// History, if not nil, serves the badges (badge.go) and
	// /api/history. If nil, they answer 404.
	History server.HistorySource
	// Discovery, if not nil, tells the status page which discovery sources
	// fail.
	Discovery server.DiscoveryStatus
	// SLOs, if not nil, gives the status page each group's standing
	// against its availability objective.
	SLOs *SLOs
	// Directory, if not nil, gives the status pages of the other
	// replicas, which the page links to for what they keep.
	Directory server.Directory
}

// Handler is the http.Handler of pulsed's HTTP listener. It is safe for
// concurrent use and starts no goroutines of its own: an event feed lives in
// its request's goroutine and ends when the client goes away or the checker
// closes. Create it with NewHandler.
type Handler struct {
	c         *checker.Checker
	obs       *Observer
	ready     func() error
	live      func() error
	logger    *slog.Logger
	results   time.Duration
	progress  time.Duration
	mux       *http.ServeMux
	tokens    *server.Tokens
	static    map[string]bool        // the URL paths of the page's shell
	history   server.HistorySource   // nil: no badges, no /api/history
	slos      *SLOs                  // nil: no objectives on the page
	discovery server.DiscoveryStatus // nil: no discovery on the page
	dir       server.Directory       // nil: no links to the other replicas' pages

	writeTimeout time.Duration            // of each write to a client
	backup       func() (Snapshot, error) // nil: no store
	backupSlot   chan struct{}            // holds a token while a backup runs: one at a time
}

// NewHandler returns the handler serving cfg.Checker.
func NewHandler(cfg Config) *Handler {
	h := &Handler{
		c:         cfg.Checker,
		obs:       cfg.Observer,
		ready:     cfg.Ready,
		live:      cfg.Live,
		logger:    cfg.Logger,
		results:   cfg.ResultsInterval,
		progress:  cfg.ProgressInterval,
		mux:       http.NewServeMux(),
		tokens:    cfg.Tokens,
		history:   cfg.History,
		slos:      cfg.SLOs,
		discovery: cfg.Discovery,
		dir:       cfg.Directory,

		writeTimeout: cfg.WriteTimeout,
		backup:       cfg.Backup,
		backupSlot:   make(chan struct{}, 1),
	}
	if h.writeTimeout <= 0 {
		h.writeTimeout = DefaultWriteTimeout
	}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if h.results <= 0 {
		h.results = time.Second
	}
	if h.progress <= 0 {
		h.progress = 15 * time.Second
	}
	if h.ready == nil {
		h.ready = func() error { return nil }
	}
	if h.live == nil {
		h.live = func() error { return nil }
	}
	if cfg.Gatherer != nil {
		h.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
			ErrorLog:          slog.NewLogLogger(h.logger.Handler(), slog.LevelError),
			EnableOpenMetrics: true,
		}))
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h.static = staticPaths(sub)
	h.mux.Handle("GET /", http.FileServerFS(sub))
	h.mux.HandleFunc("GET /api/targets", h.serveTargets)
	h.mux.HandleFunc("GET /events", h.serveEvents)
	h.mux.HandleFunc("GET /healthz", h.serveHealthz)
	h.mux.HandleFunc("GET /readyz", h.serveReadyz)
	h.mux.HandleFunc("GET /backup", h.serveBackup)
	h.routeBadges()
	return h
}

// DefaultWriteTimeout is how long a write of an answer may wait for its
// client to accept bytes before the client is cut off, if
// Config.WriteTimeout is not set.
const DefaultWriteTimeout = 30 * time.Second

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Without a deadline a client that stops reading holds its handler's
	// goroutine and what it was sending for as long as it keeps the
	// connection open: an event feed's watcher, a page of 1,000 rows.
	dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: h.writeTimeout}
	dw.extend() // for what is written at the handler's end: headers alone, a buffered body
	w = dw
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// No route reads a body. Once a handler returns, net/http reads
		// what is left of one (up to 256 KB) before it answers, with no
		// deadline: a client that announced a body and sends none held
		// the connection for good. With the deadline passed it reads what
		// has arrived, and closes the connection after the answer if more
		// was due. (HTTP/2 reads no body after the handler.)
		_ = dw.rc.SetReadDeadline(time.Now())
	}
	setSecurityHeaders(w)
	if h.authorize(w, r) {
		h.mux.ServeHTTP(w, r)
	}
}

// serveHealthz is liveness: 200 while Live returns nil, 503 with what
// stalled otherwise. Unlike readiness, a failure here asks for a restart.
func (h *Handler) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.live(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not live: " + err.Error() + "\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// serveReadyz is readiness: 200 while Ready returns nil, 503 with its
// reason otherwise.
func (h *Handler) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.ready(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// deadlineWriter is an http.ResponseWriter whose every write, and every
// flush of what was written, must be accepted by the client within
// timeout of its start.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

// extend moves the write deadline to timeout from now. A writer that takes
// no deadline (a test's recorder) writes without one.
func (d *deadlineWriter) extend() {
	_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.extend()
	return d.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls.
func (d *deadlineWriter) FlushError() error {
	d.extend()
	return d.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }
