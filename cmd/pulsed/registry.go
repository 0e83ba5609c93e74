package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/etcdreg"
)

// registryFlags choose where the registry lives: the embedded store (one
// pulsed) or etcd (several replicas sharing one fleet).
type registryFlags struct {
	kind      string
	endpoints string
	prefix    string
	leaseTTL  time.Duration
	replicaID string
	ca        string
	cert, key string
	// vantage labels where this replica probes from; suspect says when a
	// vantage is left out of the quorums (every replica must use the same).
	vantage string
	suspect checker.VantagePolicy
	// advertiseHost is the host other machines reach this replica at.
	advertiseHost string
}

func (r *registryFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.kind, "registry", "embedded", "where targets and states live: \"embedded\" (the -data-dir store, one pulsed) or \"etcd\" (shared by every pulsed replica pointed at the same -etcd-endpoints and -etcd-prefix)")
	fs.StringVar(&r.endpoints, "etcd-endpoints", "", "with -registry etcd: comma-separated etcd client `URLs`, e.g. http://127.0.0.1:2379")
	fs.StringVar(&r.prefix, "etcd-prefix", "/pulse/", "with -registry etcd: the key `prefix` of this fleet; replicas with the same prefix share it")
	fs.DurationVar(&r.leaseTTL, "etcd-lease-ttl", 10*time.Second, "with -registry etcd: a replica that stops renewing its lease (crashed, paused, cut off) loses its targets to the others after this long (at least 2s)")
	fs.StringVar(&r.ca, "etcd-ca", "", "with -registry etcd: PEM `file` of the CA that signed etcd's certificate; connects over TLS (use https:// endpoints)")
	fs.StringVar(&r.cert, "etcd-cert", "", "with -registry etcd: PEM `file` of this replica's client certificate, for an etcd that requires one (with -etcd-key)")
	fs.StringVar(&r.key, "etcd-key", "", "with -registry etcd: PEM `file` of the key of -etcd-cert")
	fs.StringVar(&r.replicaID, "replica-id", "", "with -registry etcd: this replica's member `ID` (default: host name, process ID and a random suffix)")
	fs.StringVar(&r.vantage, "vantage", "", "with -registry etcd: this replica's vantage `label`, e.g. its zone: a target with vantages k is probed from k distinct labels while there are enough; 1 to 64 of [A-Za-z0-9._:-] (default: the replica's ID)")
	fs.StringVar(&r.advertiseHost, "advertise-host", "", "with -registry etcd: the host name or IP address clients on other machines reach this replica at; the other replicas name it, with this one's -listen and -http-listen ports, to whoever asks them for what this one keeps (pulsectl history follows it to a target's history, the status page links to it). Default: the IP address of -listen and of -http-listen, when it is not a wildcard (0.0.0.0, ::); a loopback address is given to clients on loopback only")
	fs.Float64Var(&r.suspect.SuspectShare, "vantage-suspect-share", checker.DefaultSuspectShare, "with -registry etcd: a vantage that says unhealthy of at least this share of the targets it probes with others, while most of the others see them healthy, is suspect and left out of every quorum until below half of it; in (0, 1], the same on every replica")
	fs.IntVar(&r.suspect.SuspectMin, "vantage-suspect-min", checker.DefaultSuspectMin, "with -registry etcd: the fewest targets a vantage must probe with others to be judged suspect; at least 1, the same on every replica")
	fs.DurationVar(&r.suspect.SuspectAfter, "vantage-suspect-after", checker.DefaultSuspectAfter, "with -registry etcd: how long a vantage must stay over -vantage-suspect-share before it is marked suspect; longer than the others take to see a real outage (about a probe interval), at most 1h")
}

// check validates the registry flags against the others; set holds the
// flags given on the command line.
func (r *registryFlags) check(set map[string]bool, cfg *config) error {
	switch r.kind {
	case "embedded":
		for _, f := range []string{"etcd-endpoints", "etcd-prefix", "etcd-lease-ttl", "replica-id", "etcd-ca", "etcd-cert", "etcd-key", "vantage", "advertise-host", "vantage-suspect-share", "vantage-suspect-min", "vantage-suspect-after"} {
			if set[f] {
				return fmt.Errorf("-%s needs -registry etcd", f)
			}
		}
	case "etcd":
		if strings.TrimSpace(r.endpoints) == "" {
			return fmt.Errorf("-registry etcd needs -etcd-endpoints, e.g. -etcd-endpoints http://127.0.0.1:2379")
		}
		if r.leaseTTL < 2*time.Second {
			return fmt.Errorf("-etcd-lease-ttl must be at least 2s, got %v", r.leaseTTL)
		}
		if (r.cert == "") != (r.key == "") {
			return fmt.Errorf("-etcd-cert and -etcd-key go together")
		}
		if set["data-dir"] {
			return fmt.Errorf("-data-dir is the embedded registry's; with -registry etcd the registry is in etcd")
		}
		if err := r.checkVantage(set); err != nil {
			return err
		}
		if set["advertise-host"] {
			if err := checkHost(r.advertiseHost); err != nil {
				return fmt.Errorf("-advertise-host: %w", err)
			}
		}
		cfg.dataDir = ""
	default:
		return fmt.Errorf("-registry must be embedded or etcd, got %q", r.kind)
	}
	return nil
}

func (r *registryFlags) etcd() bool { return r.kind == "etcd" }

// checkVantage validates -vantage and the suspect policy.
func (r *registryFlags) checkVantage(set map[string]bool) error {
	if set["vantage"] {
		if err := etcdreg.ValidateLabel(r.vantage); err != nil {
			return fmt.Errorf("-vantage: %w", err)
		}
	}
	if s := r.suspect.SuspectShare; !(s > 0 && s <= 1) { // NaN too
		return fmt.Errorf("-vantage-suspect-share must be in (0, 1], got %v", s)
	}
	if r.suspect.SuspectMin < 1 {
		return fmt.Errorf("-vantage-suspect-min must be at least 1, got %d", r.suspect.SuspectMin)
	}
	if a := r.suspect.SuspectAfter; a <= 0 || a > checker.MaxSuspectAfter {
		return fmt.Errorf("-vantage-suspect-after must be above 0 and at most %v, got %v", checker.MaxSuspectAfter, a)
	}
	return nil
}

// checkHost accepts a host name or an IP address, without a port.
func checkHost(h string) error {
	if net.ParseIP(h) != nil {
		return nil
	}
	if h == "" || len(h) > 253 || strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != "" {
		return fmt.Errorf("want a host name or an IP address, without a port, got %q", h)
	}
	return nil
}

// advertised returns the addresses this replica gives the others for its
// clients: host:port of its gRPC listener, and its status page's URL
// (https when the HTTP listener has TLS), each with -advertise-host or
// else the listener's own IP address; "" where there is none to give (no
// HTTP listener, a wildcard address).
func (r *registryFlags) advertised(ls *listeners, httpTLS bool) (api, page string) {
	api = advertisedAddr(r.advertiseHost, ls.grpc)
	if ls.http != nil {
		if a := advertisedAddr(r.advertiseHost, ls.http); a != "" {
			page = "http://" + a + "/"
			if httpTLS {
				page = "https://" + a + "/"
			}
		}
	}
	return api, page
}

// advertisedAddr is host (or l's own IP address when host is "" and l's
// is not a wildcard) with l's port, or "".
func advertisedAddr(host string, l net.Listener) string {
	a, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return ""
	}
	if host == "" {
		if a.IP.IsUnspecified() || a.Zone != "" { // a link-local address is of no use without its zone
			return ""
		}
		host = a.IP.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// openEtcd connects to etcd and announces this replica, reached at api and
// page (either may be "").
func (r *registryFlags) openEtcd(logger *slog.Logger, api, page string) (*etcdreg.Registry, error) {
	eps := r.endpointList()
	tlsCfg, err := r.tlsConfig()
	if err != nil {
		return nil, err
	}
	reg, err := etcdreg.Open(context.Background(), etcdreg.Options{
		TLS:       tlsCfg,
		Endpoints: eps,
		Prefix:    r.prefix,
		ID:        r.replicaID,
		Vantage:   r.vantage,
		LeaseTTL:  r.leaseTTL,
		API:       api,
		Page:      page,
		Logger:    logger.With("component", "etcd"),
	})
	if err != nil {
		return nil, fmt.Errorf("-registry etcd: %w", err)
	}
	logger.Info("joined the replicas on etcd", "replica", reg.ID(), "prefix", r.prefix, "endpoints", strings.Join(eps, ","), "advertised_api", api, "advertised_page", page)
	return reg, nil
}

// endpointList returns -etcd-endpoints as a list.
func (r *registryFlags) endpointList() []string {
	var eps []string
	for _, e := range strings.Split(r.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	return eps
}

// tlsConfig builds the TLS configuration for etcd from -etcd-ca,
// -etcd-cert and -etcd-key, or returns nil for plaintext.
func (r *registryFlags) tlsConfig() (*tls.Config, error) {
	if r.ca == "" && r.cert == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.ca != "" {
		pem, err := os.ReadFile(r.ca)
		if err != nil {
			return nil, fmt.Errorf("-etcd-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-etcd-ca: no PEM certificate in %s", r.ca)
		}
	}
	if r.cert != "" {
		pair, err := tls.LoadX509KeyPair(r.cert, r.key)
		if err != nil {
			return nil, fmt.Errorf("-etcd-cert/-etcd-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// openStore opens the embedded store, or returns nil to keep the registry
// in memory.
func openStore(dataDir string, logger *slog.Logger) (*boltstore.Store, error) {
	if dataDir == "" {
		logger.Warn("no -data-dir: targets live in memory only and are lost when pulsed stops")
		return nil, nil
	}
	_, statErr := os.Stat(filepath.Join(dataDir, boltstore.FileName))
	st, err := boltstore.Open(dataDir, time.Second)
	if err != nil {
		return nil, fmt.Errorf("-data-dir: %w", err)
	}
	path := st.Path()
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // a relative -data-dir depends on where pulsed starts: say which
	}
	if errors.Is(statErr, os.ErrNotExist) {
		logger.Info("store created: no targets yet; pulsed finds them here again when it starts with the same -data-dir", "path", path)
		return st, nil
	}
	logger.Info("store opened", "path", path)
	return st, nil
}

var _ checker.Shared = (*etcdreg.Registry)(nil)
