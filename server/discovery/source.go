package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/dns"
	"github.com/prometheus/prometheus/discovery/file"
	"github.com/prometheus/prometheus/discovery/http"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/pulsehealth/pulse/server"
)

// source is one SD config of a group, and what is known of it: when it
// last answered and why it fails, while it does.
//
// Prometheus's discoverers report a failure only by logging it, so a
// source learns of its failures from the records its discoverer logs at
// ERROR (see sourceHandler), and of its answers from what its discoverer
// sends (see trackedDiscoverer). A failure ends when the source answers
// again: for a refreshed mechanism (http_sd, dns_sd) at an answer with no
// error logged since the one before (dns_sd logs a name that failed and
// still sends the others); for file_sd, whose refresh reads each file in
// turn, a file that failed clears when that file is read again.
type source struct {
	m      *Manager
	group  string
	name   string           // "http_sd 0"
	detail string           // what it reads, without secrets
	cfg    discovery.Config // Prometheus's config, to compare on reload
	byFile bool             // file_sd: failures are kept per file
	set    string           // its target set's name in Prometheus's manager
	redact func(string) string

	mu          sync.Mutex // protects the fields below
	retired     bool       // dropped by a reload: reports nothing more
	lastRefresh time.Time
	errs        map[string]string // why it fails: by file for file_sd, else under ""
	cycleErr    bool              // an error was logged since the last answer
	since       time.Time         // when errs became non-empty
	// route takes the errors its discoverer logs to its tracker while one
	// runs (until routeDone), so that they are recorded in the order the
	// discoverer made them, between its answers; see trackedDiscoverer.
	route     chan failure
	routeDone chan struct{}
	targets   int // in its last good answer; set by apply
}

func newSource(m *Manager, group, name string, cfg discovery.Config) *source {
	s := &source{m: m, group: group, name: name, cfg: cfg, set: setName(group, name), redact: m.redactText, errs: map[string]string{}}
	switch c := cfg.(type) {
	case *file.SDConfig:
		s.byFile = true
		s.detail = "files " + strings.Join(c.Files, ", ")
	case *http.SDConfig:
		s.detail = "url " + safeURL(c.URL)
	case *dns.SDConfig:
		typ := c.Type
		if typ == "" {
			typ = "SRV"
		}
		s.detail = fmt.Sprintf("%s %s", typ, strings.Join(c.Names, ", "))
		if typ != "SRV" {
			s.detail += fmt.Sprintf(" port %d", c.Port)
		}
	}
	return s
}

// setName names a source's target set in Prometheus's discovery manager,
// and in its metrics' config label: "api (http_sd 0)".
func setName(group, source string) string { return group + " (" + source + ")" }

// safeURL shows a URL without its credentials and query, which may hold
// tokens.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// failure is an error a discoverer logged; key is the file at fault for
// file_sd.
type failure struct{ key, msg string }

// report records an error its discoverer logged: through its tracker,
// after the answers sent before it, while one runs.
func (s *source) report(key, msg string) {
	s.mu.Lock()
	route, done := s.route, s.routeDone
	s.mu.Unlock()
	if route != nil {
		select {
		case route <- failure{key, msg}:
			return
		case <-done:
		}
	}
	s.failed(key, msg)
}

// failed records an error its discoverer logged; key is the file at fault
// for file_sd.
func (s *source) failed(key, msg string) {
	msg = s.redact(msg)
	s.mu.Lock()
	if !s.byFile {
		key = ""
	}
	was := len(s.errs) > 0
	s.errs[key] = msg
	s.cycleErr = true
	if !was {
		s.since = time.Now()
	}
	retired := s.retired
	s.mu.Unlock()
	if retired {
		return
	}
	s.m.sourceUp.WithLabelValues(s.group, s.name).Set(0)
	if !was {
		s.m.sourceChanged(s, true, msg)
	}
}

// answered records an answer of its discoverer.
func (s *source) answered(tgs []*targetgroup.Group) {
	s.mu.Lock()
	was := len(s.errs) > 0
	s.lastRefresh = time.Now()
	switch {
	case s.byFile:
		delete(s.errs, "")
		for _, tg := range tgs {
			if tg == nil {
				continue
			}
			// file_sd names a file's groups "PATH:INDEX".
			if i := strings.LastIndexByte(tg.Source, ':'); i > 0 {
				delete(s.errs, tg.Source[:i])
			}
		}
	case !s.cycleErr:
		clear(s.errs)
	}
	s.cycleErr = false
	now := len(s.errs) > 0
	if !now {
		s.since = time.Time{}
	}
	retired := s.retired
	s.mu.Unlock()
	if retired {
		return
	}
	if !now {
		s.m.sourceUp.WithLabelValues(s.group, s.name).Set(1)
	}
	if was && !now {
		s.m.sourceChanged(s, false, "")
	}
}

// status returns what the source knows, for ListDiscovery.
func (s *source) status() server.DiscoverySourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return server.DiscoverySourceStatus{
		Name:        s.name,
		Detail:      s.detail,
		LastRefresh: s.lastRefresh,
		Targets:     s.targets,
		LastError:   s.lastErrorLocked(),
		ErrorSince:  s.since,
	}
}

func (s *source) lastErrorLocked() string {
	if len(s.errs) == 0 {
		return ""
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s.errs)) {
		out = append(out, s.errs[k])
	}
	return strings.Join(out, "; ")
}

// trackedConfig is a group's SD config as Prometheus's manager runs it:
// Prometheus's own, whose discoverer reports to the source. Two are equal
// (reflect.DeepEqual, as the manager compares them on reload) when their
// configs are and they report to the same source, so an unchanged source
// keeps running across a reload.
type trackedConfig struct {
	discovery.Config
	src *source
}

// NewDiscoverer returns Prometheus's discoverer for the config, logging
// through the source and reporting its answers to it.
func (c trackedConfig) NewDiscoverer(opts discovery.DiscovererOptions) (discovery.Discoverer, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := opts.Logger.Handler()
	if sh, ok := h.(*sourceHandler); ok {
		h = sh.h // the manager's own handler: redact once
	}
	opts.Logger = slog.New(&sourceHandler{h: h, src: c.src, redact: c.src.redact})
	d, err := c.Config.NewDiscoverer(opts)
	if err != nil {
		c.src.failed("", "cannot start: "+err.Error())
		return nil, err
	}
	return &trackedDiscoverer{d: d, src: c.src}, nil
}

// trackedDiscoverer passes on what a discoverer sends, telling its source.
type trackedDiscoverer struct {
	d   discovery.Discoverer
	src *source
}

// Run runs the discoverer until ctx is done, and returns once it has.
func (t *trackedDiscoverer) Run(ctx context.Context, up chan<- []*targetgroup.Group) {
	ch := make(chan []*targetgroup.Group)
	// The discoverer's answers and its logged errors come to this loop
	// each through a channel without a buffer, from the discoverer's
	// goroutine: they are recorded in the order it made them, so an
	// answer it sent before an error cannot end that error.
	fails, routeDone := make(chan failure), make(chan struct{})
	t.src.mu.Lock()
	t.src.route, t.src.routeDone = fails, routeDone
	t.src.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.d.Run(ctx, ch)
	}()
	defer func() {
		close(routeDone) // errors logged while it stops are recorded at once
		<-done
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-fails:
			t.src.failed(f.key, f.msg)
		case tgs := <-ch:
			t.src.answered(tgs)
			select {
			case up <- tgs:
			case <-ctx.Done():
				return
			}
		}
	}
}

// sourceHandler is the slog.Handler of Prometheus's discovery code: it
// redacts the sources' secrets from every record and, for a source's
// discoverer, tells the source of each error it logs.
type sourceHandler struct {
	h      slog.Handler
	src    *source // nil for the manager's own records
	redact func(string) string
}

func (h *sourceHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError && h.src != nil || h.h.Enabled(ctx, l)
}

func (h *sourceHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
	var path, errText string
	r.Attrs(func(a slog.Attr) bool {
		a = h.redactAttr(a)
		switch a.Key {
		case "path":
			path = a.Value.String()
		case "err", "error":
			errText = a.Value.String()
		}
		out.AddAttrs(a)
		return true
	})
	if h.src != nil && r.Level >= slog.LevelError {
		msg := r.Message // Prometheus's words for what failed
		if errText != "" {
			msg = errText // what went wrong, which says it better
		}
		if path != "" && !strings.HasSuffix(path, "/") {
			msg = path + ": " + msg
		} else {
			path = "" // a directory watched, not a file read
		}
		h.src.report(path, msg)
	}
	if !h.h.Enabled(ctx, r.Level) {
		return nil
	}
	return h.h.Handle(ctx, out)
}

func (h *sourceHandler) redactAttr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.redact(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, h.redact(err.Error()))
		}
		if st, ok := a.Value.Any().(fmt.Stringer); ok {
			return slog.String(a.Key, h.redact(st.String()))
		}
		return slog.String(a.Key, h.redact(fmt.Sprint(a.Value.Any())))
	case slog.KindGroup:
		g := a.Value.Group()
		out := make([]any, len(g))
		for i, ga := range g {
			out[i] = h.redactAttr(ga)
		}
		return slog.Group(a.Key, out...)
	}
	return a
}

func (h *sourceHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = h.redactAttr(a)
	}
	return &sourceHandler{h: h.h.WithAttrs(red), src: h.src, redact: h.redact}
}

func (h *sourceHandler) WithGroup(name string) slog.Handler {
	return &sourceHandler{h: h.h.WithGroup(name), src: h.src, redact: h.redact}
}
