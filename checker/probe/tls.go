package probe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Limits on a TLSSpec's fields, checked by Validate.
const (
	// MaxTLSPathLen bounds TLSSpec's file names, in bytes.
	MaxTLSPathLen = 4096
	// MaxPEMLen bounds TLSSpec's inline PEM fields, and the files named
	// by its file fields, in bytes.
	MaxPEMLen = 256 << 10
	// MaxCertExpiry bounds TLSSpec.CertExpiryWarn and CertExpiryFail.
	MaxCertExpiry = 5 * 365 * 24 * time.Hour
)

// TLSSpec is how a probe speaks TLS: which servers it trusts, the client
// certificate it shows, the name it asks for and verifies, the oldest
// version it accepts, and how close to expiry a server's certificate may
// be. The zero TLSSpec verifies the server against the system roots under
// the name the probe connects to, with TLS 1.2 or later.
//
// Files are read when the Prober is built (a file that cannot be read or
// parsed makes Factory.New fail) and read again, before a new connection,
// when their size or modification time changed: a certificate rotated on
// disk is used without registering the target again. A file that becomes
// unreadable fails the probes that need it, saying which file.
type TLSSpec struct {
	// CAFile names a PEM file of the certificates that sign trusted
	// servers, in place of the system roots; CAPEM holds such
	// certificates inline. At most one of them.
	CAFile string `json:",omitzero"`
	CAPEM  string `json:",omitzero"`
	// CertFile and KeyFile name the PEM files of a client certificate and
	// its private key, for servers that require one (mutual TLS); CertPEM
	// and KeyPEM hold them inline. A certificate needs its key. KeyPEM is
	// a secret: the API never shows it.
	CertFile string `json:",omitzero"`
	KeyFile  string `json:",omitzero"`
	CertPEM  string `json:",omitzero"`
	KeyPEM   string `json:",omitzero"`
	// ServerName is the name sent in SNI and verified against the
	// server's certificate. Empty means the host the probe connects to.
	ServerName string `json:",omitzero"`
	// InsecureSkipVerify accepts any certificate the server shows. The
	// connection is encrypted but not authenticated; a target's status
	// warns about it.
	InsecureSkipVerify bool `json:",omitzero"`
	// MinVersion is the oldest TLS version accepted: "1.0", "1.1", "1.2"
	// or "1.3". Empty means "1.2".
	MinVersion string `json:",omitzero"`
	// CertExpiryFail fails a probe whose server shows a certificate (the
	// leaf or another in its chain) that expires within it, e.g.
	// "certificate expires in 3d12h (2026-12-05)". CertExpiryWarn lets
	// such a probe pass with a warning instead. Zero means no check; each
	// at most MaxCertExpiry, and a warning only makes sense longer than
	// the failure.
	CertExpiryWarn time.Duration `json:",omitzero"`
	CertExpiryFail time.Duration `json:",omitzero"`
}

// tlsVersions are the versions MinVersion names.
var tlsVersions = map[string]uint16{
	"1.0": tls.VersionTLS10,
	"1.1": tls.VersionTLS11,
	"1.2": tls.VersionTLS12,
	"1.3": tls.VersionTLS13,
}

// validate checks the spec without reading files; field is its path, such
// as "http.tls".
func (s *TLSSpec) validate(field string) error {
	bad := func(sub, format string, args ...any) error {
		return &FieldError{Field: field + "." + sub, Reason: fmt.Sprintf(format, args...)}
	}
	for _, f := range []struct{ name, v string }{{"ca_file", s.CAFile}, {"cert_file", s.CertFile}, {"key_file", s.KeyFile}} {
		if len(f.v) > MaxTLSPathLen {
			return bad(f.name, "must be at most %d bytes, got %d", MaxTLSPathLen, len(f.v))
		}
	}
	for _, f := range []struct{ name, v string }{{"ca_pem", s.CAPEM}, {"cert_pem", s.CertPEM}, {"key_pem", s.KeyPEM}} {
		if len(f.v) > MaxPEMLen {
			return bad(f.name, "must be at most %d bytes, got %d", MaxPEMLen, len(f.v))
		}
	}
	if s.CAFile != "" && s.CAPEM != "" {
		return bad("ca_file", "set ca_file or ca_pem, not both")
	}
	if s.CertFile != "" && s.CertPEM != "" {
		return bad("cert_file", "set cert_file or cert_pem, not both")
	}
	if s.KeyFile != "" && s.KeyPEM != "" {
		return bad("key_file", "set key_file or key_pem, not both")
	}
	hasCert, hasKey := s.CertFile != "" || s.CertPEM != "", s.KeyFile != "" || s.KeyPEM != ""
	switch {
	case hasCert && !hasKey:
		return bad("key_file", "is required with a client certificate: set key_file or key_pem")
	case hasKey && !hasCert:
		return bad("cert_file", "is required with a client key: set cert_file or cert_pem")
	}
	if s.CAPEM != "" {
		if _, err := parseCAs([]byte(s.CAPEM)); err != nil {
			return bad("ca_pem", "%v", err)
		}
	}
	if s.CertPEM != "" && s.KeyPEM != "" {
		if _, err := tls.X509KeyPair([]byte(s.CertPEM), []byte(s.KeyPEM)); err != nil {
			// The error never quotes the key.
			return bad("cert_pem", "with key_pem is not a certificate and its key: %v", err)
		}
	}
	if s.ServerName != "" && (len(s.ServerName) > 253 || !validHost(s.ServerName)) {
		return bad("server_name", "must be a host name of at most 253 bytes, e.g. \"api.internal\", got %.300q", s.ServerName)
	}
	if _, ok := tlsVersions[s.MinVersion]; !ok && s.MinVersion != "" {
		return bad("min_version", `unknown TLS version %.40q: use "1.0", "1.1", "1.2" or "1.3" (empty means 1.2)`, s.MinVersion)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"cert_expiry_warn", s.CertExpiryWarn}, {"cert_expiry_fail", s.CertExpiryFail}} {
		if f.v < 0 || f.v > MaxCertExpiry {
			return bad(f.name, "must be between 0 (no check) and %v, got %v", MaxCertExpiry, f.v)
		}
	}
	if s.CertExpiryWarn > 0 && s.CertExpiryWarn <= s.CertExpiryFail {
		return bad("cert_expiry_warn", "must be longer than cert_expiry_fail (%v) to warn before probes fail, got %v", s.CertExpiryFail, s.CertExpiryWarn)
	}
	return nil
}

// parseCAs parses PEM certificates into a pool, refusing input that holds
// none or that is not PEM.
func parseCAs(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) > 0 && n == 0 {
				return nil, fmt.Errorf("is not PEM: want -----BEGIN CERTIFICATE----- blocks")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %v", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("holds no PEM certificate")
	}
	return pool, nil
}

// Warnings lists what a person should know about s that does not make it
// invalid, e.g. that a probe does not verify its server's certificate.
// Each warning names its field.
func (s Spec) Warnings() []string {
	var out []string
	for _, t := range []struct {
		field string
		tls   *TLSSpec
	}{{"http.tls", s.httpTLS()}, {"tcp.tls", s.tcpTLS()}, {"grpc.tls_options", s.grpcTLS()}} {
		if t.tls != nil && t.tls.InsecureSkipVerify {
			out = append(out, t.field+".insecure_skip_verify: the server's certificate is not verified; anyone on the path can answer for it")
		}
	}
	return out
}

func (s Spec) httpTLS() *TLSSpec {
	if s.HTTP == nil {
		return nil
	}
	return s.HTTP.TLS
}

func (s Spec) tcpTLS() *TLSSpec {
	if s.TCP == nil {
		return nil
	}
	return s.TCP.TLS
}

func (s Spec) grpcTLS() *TLSSpec {
	if s.GRPC == nil {
		return nil
	}
	return s.GRPC.TLSOptions
}

// fileStamp identifies a version of a file: a change of size or
// modification time makes a tlsSource read it again. A file read within
// racyStampWindow of its modification time may be rewritten with the same
// size inside the file system's timestamp granularity, so until its stamp
// is that old its contents are compared too.
type fileStamp struct {
	size int64
	mod  time.Time
	read time.Time // when the contents were read or last compared
	sum  [sha256.Size]byte
}

// racyStampWindow is how long after a file's modification a same-size
// rewrite can keep its modification time: far more than any file
// system's timestamp granularity.
const racyStampWindow = 2 * time.Second

// racy reports whether a rewrite could hide behind an equal stamp.
func (st fileStamp) racy() bool {
	return st.read.Sub(st.mod) < racyStampWindow
}

// tlsSource holds a TLSSpec's material, read from its files and inline
// PEM, and makes the TLS configuration of each new connection. It reads
// its files again when they change. It is safe for concurrent use.
type tlsSource struct {
	field    string // "http.tls", for errors
	spec     TLSSpec
	defRoots *x509.CertPool // the roots when the spec names none; nil means the system's
	version  uint16

	mu      sync.Mutex // protects the fields below
	stamps  map[string]fileStamp
	roots   *x509.CertPool
	cert    *tls.Certificate
	changed func() // called after material changed; may be nil
}

// newTLSSource reads s's material. Its errors are *FieldErrors naming the
// file field that could not be used.
func newTLSSource(field string, s *TLSSpec, defRoots *x509.CertPool) (*tlsSource, error) {
	src := &tlsSource{field: field, spec: *s, defRoots: defRoots, version: tls.VersionTLS12, stamps: map[string]fileStamp{}}
	if v, ok := tlsVersions[s.MinVersion]; ok {
		src.version = v
	}
	if err := src.refresh(); err != nil {
		return nil, err
	}
	return src, nil
}

// readPEMFile reads a file of at most MaxPEMLen bytes and its stamp.
func readPEMFile(path string) ([]byte, fileStamp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileStamp{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileStamp{}, err
	}
	if fi.Size() > MaxPEMLen {
		return nil, fileStamp{}, fmt.Errorf("is %d bytes, more than %d", fi.Size(), MaxPEMLen)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil && fi.Size() > 0 {
		return nil, fileStamp{}, err
	}
	return data, fileStamp{size: fi.Size(), mod: fi.ModTime(), read: time.Now(), sum: sha256.Sum256(data)}, nil
}

// stale reports whether a file differs from when it was read.
func (t *tlsSource) staleLocked(path string) bool {
	if path == "" {
		return false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return true // refresh says why
	}
	st, ok := t.stamps[path]
	if !ok || st.size != fi.Size() || !st.mod.Equal(fi.ModTime()) {
		return true
	}
	if !st.racy() {
		return false
	}
	_, now, err := readPEMFile(path)
	if err != nil || now.sum != st.sum || !now.mod.Equal(st.mod) {
		return true
	}
	t.stamps[path] = now // the same contents, compared later than before
	return false
}

// refresh (re)reads the material whose files changed; at first, all of
// it. On an error the material read before stays, unused: the caller fails.
func (t *tlsSource) refresh() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.spec
	first := t.roots == nil && t.cert == nil && len(t.stamps) == 0
	fieldErr := func(sub, format string, args ...any) error {
		return &FieldError{Field: t.field + "." + sub, Reason: fmt.Sprintf(format, args...)}
	}
	changed := false
	if first || t.staleLocked(s.CAFile) {
		roots := t.defRoots
		switch {
		case s.CAFile != "":
			data, st, err := readPEMFile(s.CAFile)
			if err != nil {
				return fieldErr("ca_file", "cannot read %q: %v", s.CAFile, describeFileErr(err))
			}
			if roots, err = parseCAs(data); err != nil {
				return fieldErr("ca_file", "%q %v", s.CAFile, err)
			}
			t.stamps[s.CAFile] = st
		case s.CAPEM != "":
			var err error
			if roots, err = parseCAs([]byte(s.CAPEM)); err != nil {
				return fieldErr("ca_pem", "%v", err)
			}
		}
		t.roots = roots
		changed = !first
	}
	if first || t.staleLocked(s.CertFile) || t.staleLocked(s.KeyFile) {
		certPEM, keyPEM := []byte(s.CertPEM), []byte(s.KeyPEM)
		var certSt, keySt fileStamp
		var err error
		if s.CertFile != "" {
			if certPEM, certSt, err = readPEMFile(s.CertFile); err != nil {
				return fieldErr("cert_file", "cannot read %q: %v", s.CertFile, describeFileErr(err))
			}
		}
		if s.KeyFile != "" {
			if keyPEM, keySt, err = readPEMFile(s.KeyFile); err != nil {
				return fieldErr("key_file", "cannot read %q: %v", s.KeyFile, describeFileErr(err))
			}
		}
		if len(certPEM) > 0 || len(keyPEM) > 0 {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				sub := "cert_file"
				if s.CertFile == "" {
					sub = "cert_pem"
				}
				return fieldErr(sub, "with its key is not a certificate and its key: %v", err)
			}
			t.cert = &pair
		}
		if s.CertFile != "" {
			t.stamps[s.CertFile] = certSt
		}
		if s.KeyFile != "" {
			t.stamps[s.KeyFile] = keySt
		}
		changed = changed || !first
	}
	if changed && t.changed != nil {
		t.changed()
	}
	return nil
}

// describeFileErr drops the path an *os.PathError repeats.
func describeFileErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// config returns the configuration of a new connection to host (the host
// the probe dials, without a port), after reading any file that changed.
func (t *tlsSource) config(host string) (*tls.Config, error) {
	if err := t.refresh(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	roots, cert := t.roots, t.cert
	t.mu.Unlock()
	name := t.spec.ServerName
	if name == "" {
		name = host
	}
	c := &tls.Config{
		RootCAs:            roots,
		ServerName:         name,
		MinVersion:         t.version,
		InsecureSkipVerify: t.spec.InsecureSkipVerify, //nolint:gosec // asked for by name; the status warns
	}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return c, nil
}

// handshake runs a TLS client handshake on conn to host under ctx, and
// returns the TLS connection. conn is closed on failure.
func (t *tlsSource) handshake(ctx context.Context, conn net.Conn, host string, nextProtos []string) (*tls.Conn, error) {
	cfg, err := t.config(host)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	cfg.NextProtos = nextProtos
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return tc, nil
}

// ExpiryError is a probe's failure, or warning, about a certificate the
// server showed that expires soon: within TLSSpec.CertExpiryFail for a
// failure, CertExpiryWarn for a warning.
type ExpiryError struct {
	NotAfter time.Time     // when the certificate expires
	Left     time.Duration // time left at the probe; negative once expired
	Warning  bool          // within the warning window only: the probe passes
}

// Error returns e.g. "certificate expires in 3d12h (2026-12-05)".
func (e *ExpiryError) Error() string {
	day := e.NotAfter.UTC().Format(time.DateOnly)
	if e.Left <= 0 {
		return fmt.Sprintf("certificate expired %s ago (%s)", shortDuration(-e.Left), day)
	}
	return fmt.Sprintf("certificate expires in %s (%s)", shortDuration(e.Left), day)
}

// shortDuration writes d as days and hours ("3d12h"), or hours and minutes
// under a day ("5h30m"), or minutes, or seconds.
func shortDuration(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d >= day:
		days, hours := d/day, (d%day)/time.Hour
		if hours == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, hours)
	case d >= time.Hour:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", d/time.Minute)
	default:
		return fmt.Sprintf("%ds", d/time.Second)
	}
}

// firstNotAfter returns when the first of the peer's certificates
// expires; cs has at least one.
func firstNotAfter(cs *tls.ConnectionState) time.Time {
	first := cs.PeerCertificates[0].NotAfter
	for _, c := range cs.PeerCertificates[1:] {
		if c.NotAfter.Before(first) {
			first = c.NotAfter
		}
	}
	return first
}

// checkExpiry returns an *ExpiryError when one of the peer's certificates
// expires within the spec's failure window (Warning false) or its warning
// window (Warning true), or nil.
func (t *tlsSource) checkExpiry(cs *tls.ConnectionState, now time.Time) *ExpiryError {
	s := &t.spec
	if cs == nil || (s.CertExpiryFail <= 0 && s.CertExpiryWarn <= 0) || len(cs.PeerCertificates) == 0 {
		return nil
	}
	first := firstNotAfter(cs)
	left := first.Sub(now)
	switch {
	case s.CertExpiryFail > 0 && left < s.CertExpiryFail:
		return &ExpiryError{NotAfter: first, Left: left}
	case s.CertExpiryWarn > 0 && left < s.CertExpiryWarn:
		return &ExpiryError{NotAfter: first, Left: left, Warning: true}
	}
	return nil
}

// expiryWatch checks the certificates of a prober's connections against
// its TLSSpec's expiry windows and keeps what the last check saw. The zero
// expiryWatch (no TLS) checks nothing. It is safe for concurrent use.
type expiryWatch struct {
	src  *tlsSource
	last atomic.Pointer[certSeen]
}

// certSeen is what one probe saw of its server's certificates.
type certSeen struct {
	notAfter time.Time
	warning  *ExpiryError
	isNew    bool        // a warning after none (or none yet)
	reported atomic.Bool // NewCertWarning returned it
}

// check returns an *ExpiryError when a certificate in cs expires within
// the failure window; within the warning window it returns nil and keeps
// the warning for lastSeen. A spec without expiry windows checks nothing.
func (w *expiryWatch) check(cs *tls.ConnectionState, now time.Time) error {
	if w.src == nil || (w.src.spec.CertExpiryFail <= 0 && w.src.spec.CertExpiryWarn <= 0) || cs == nil || len(cs.PeerCertificates) == 0 {
		return nil
	}
	e := w.src.checkExpiry(cs, now)
	seen := &certSeen{notAfter: firstNotAfter(cs)}
	if e != nil && e.Warning {
		seen.warning = e
		prev := w.last.Load()
		seen.isNew = prev == nil || prev.warning == nil
		if !seen.isNew && prev.isNew && !prev.reported.Load() {
			seen.isNew = true // the first one was never taken
		}
	}
	w.last.Store(seen)
	if e != nil && !e.Warning {
		return e
	}
	return nil
}

// lastSeen returns what the last check saw: zero values before any.
func (w *expiryWatch) lastSeen() (time.Time, *ExpiryError) {
	if seen := w.last.Load(); seen != nil {
		return seen.notAfter, seen.warning
	}
	return time.Time{}, nil
}

// newWarning returns the last check's warning when it is new (the first
// since a check without one), once.
func (w *expiryWatch) newWarning() *ExpiryError {
	seen := w.last.Load()
	if seen == nil || !seen.isNew || !seen.reported.CompareAndSwap(false, true) {
		return nil
	}
	return seen.warning
}

// CertExpiryReporter is implemented by the Probers of TLS probes.
// LastCertExpiry returns when the first-expiring certificate (leaf or
// chain) that the last probe's server showed expires, the zero time when
// the spec sets no cert_expiry window or no probe got that far, and, when
// that probe passed within TLSSpec.CertExpiryWarn, the warning (nil
// otherwise). NewCertWarning returns that warning when it is the first
// since a probe passed outside the warning window (or since the Prober was
// built), and only to its first caller: nil otherwise. Both are safe to
// call concurrently with Probe, and after Probe returns they report that
// probe.
type CertExpiryReporter interface {
	LastCertExpiry() (notAfter time.Time, warning *ExpiryError)
	NewCertWarning() *ExpiryError
}

// LastCertExpiry implements CertExpiryReporter.
func (p *tcpProber) LastCertExpiry() (time.Time, *ExpiryError) { return p.expiry.lastSeen() }

// NewCertWarning implements CertExpiryReporter.
func (p *tcpProber) NewCertWarning() *ExpiryError { return p.expiry.newWarning() }
