package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pulsehealth/pulse/checker"
	pulsedns "github.com/pulsehealth/pulse/server/dns"
)

// dnsFlags are the DNS interface's flags (docs/integrations/dns.md).
type dnsFlags struct {
	listen     string
	domain     string
	ttl        time.Duration
	maxAnswers int
	allow      cidrList
	rateLimit  float64
	rateBurst  int
}

func (f *dnsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "dns-listen", "", "`address` to answer DNS on, UDP and TCP (host:port; port 0 picks a free one); empty: off")
	fs.StringVar(&f.domain, "dns-domain", pulsedns.DefaultDomain, "the DNS `zone` answered: GROUP.<zone>, _GROUP._tcp.<zone>, NAME.target.<zone>")
	fs.DurationVar(&f.ttl, "dns-ttl", 0, "TTL of DNS answers and of negative answers (whole seconds); 0 asks resolvers not to cache, so answers follow health at once")
	fs.IntVar(&f.maxAnswers, "dns-max-answers", 0, "most records in one DNS answer, a random subset; 0: as many as the message size allows (UDP answers over it are truncated: TC, retry over TCP)")
	fs.Var(&f.allow, "dns-allow", "comma-separated CIDRs or addresses of the clients answered over DNS; others are REFUSED. Empty: any client, and then a non-loopback -dns-listen needs -insecure")
	fs.Float64Var(&f.rateLimit, "dns-rate-limit", 1000, "DNS queries per second answered per client address (over the limit: REFUSED); 0: no limit")
	fs.IntVar(&f.rateBurst, "dns-rate-burst", 2000, "DNS queries a client may send in a burst above -dns-rate-limit")
}

// config turns the flags into the DNS server's config. Like the gRPC
// listener, a listener other machines can reach needs a say on who may ask:
// an allow list, or -insecure.
func (f *dnsFlags) config(insecure bool, logger *slog.Logger) (pulsedns.Config, error) {
	cfg := pulsedns.Config{
		Domain:     f.domain,
		TTL:        f.ttl,
		MaxAnswers: f.maxAnswers,
		RateLimit:  f.rateLimit,
		RateBurst:  f.rateBurst,
		Logger:     logger,
	}
	for _, s := range f.allow.list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return cfg, fmt.Errorf("-dns-allow: %q is neither a CIDR nor an address", s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		cfg.Allow = append(cfg.Allow, p.Masked())
	}
	if f.listen != "" && !insecure && cfg.Allow == nil && !isLoopback(f.listen) {
		return cfg, fmt.Errorf("-dns-listen %s is reachable from other machines, and DNS has no tokens: list the client networks with -dns-allow, or pass -insecure to answer anyone", f.listen)
	}
	if err := cfg.Validate(); err != nil {
		// The fields' flags: Domain is -dns-domain, and so on.
		name := map[string]string{"Domain": "-dns-domain", "TTL": "-dns-ttl", "MaxAnswers": "-dns-max-answers", "RateLimit": "-dns-rate-limit", "RateBurst": "-dns-rate-burst"}
		field, rest, _ := strings.Cut(err.Error(), ":")
		if flagName, ok := name[field]; ok {
			return cfg, fmt.Errorf("%s:%s", flagName, rest)
		}
		return cfg, err
	}
	return cfg, nil
}

// check reports what is wrong with the flags, so that pulsed stops before
// it opens anything. Set DNS flags are checked even with DNS off: a
// mistake there is one still when -dns-listen is added.
func (f *dnsFlags) check(insecure bool) error {
	_, err := f.config(insecure, nil)
	return err
}

// startDNS serves the DNS interface on pc (UDP) and l (TCP), bound to
// -dns-listen, and logs "dns listening" with their address; with both nil
// (-dns-listen empty) it serves nothing. The returned stop is never nil
// and may be called more than once.
func startDNS(cfg config, pc net.PacketConn, l net.Listener, c *checker.Checker, reg prometheus.Registerer, logger *slog.Logger) (stop func(), err error) {
	f := cfg.dns
	if pc == nil && l == nil {
		return func() {}, nil
	}
	logger = logger.With("component", "dns")
	dcfg, err := f.config(cfg.security.insecure, logger)
	if err != nil {
		return nil, err
	}
	s, err := pulsedns.New(c, dcfg)
	if err != nil {
		return nil, fmt.Errorf("dns: %w", err)
	}
	// TCP connections count against the same limits as the gRPC
	// listener's, under their own label.
	if err := s.Serve(pc, cfg.conns.limit(l, "dns", reg)); err != nil {
		s.Close()
		return nil, err
	}
	registerDNSMetrics(reg, s)
	logger.Info("dns listening", "addr", pc.LocalAddr().String(), "domain", strings.ToLower(dcfg.Domain), "ttl", dcfg.TTL.String())
	return func() {
		if err := s.Close(); err != nil {
			logger.Warn("dns shutdown", "error", err)
		}
	}, nil
}

// registerDNSMetrics exports the DNS server's counts.
func registerDNSMetrics(reg prometheus.Registerer, s *pulsedns.Server) {
	counter := func(name, help string, labels prometheus.Labels, pick func(pulsedns.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(pick(s.Stats())) })
	}
	const refusedHelp = "DNS queries REFUSED: reason=\"policy\" for clients not in -dns-allow, reason=\"zone\" for names outside the domain and classes other than IN, reason=\"rate_limit\" over -dns-rate-limit."
	reg.MustRegister(
		counter("pulse_dns_queries_total", "DNS queries answered, whatever the answer; malformed messages are counted apart, in pulse_dns_malformed_total.", nil, func(st pulsedns.Stats) uint64 { return st.Queries }),
		counter("pulse_dns_refused_total", refusedHelp, prometheus.Labels{"reason": "policy"}, func(st pulsedns.Stats) uint64 { return st.Refused }),
		counter("pulse_dns_refused_total", refusedHelp, prometheus.Labels{"reason": "zone"}, func(st pulsedns.Stats) uint64 { return st.OutOfZone }),
		counter("pulse_dns_refused_total", refusedHelp, prometheus.Labels{"reason": "rate_limit"}, func(st pulsedns.Stats) uint64 { return st.RateLimited }),
		counter("pulse_dns_nxdomain_total", "DNS queries answered NXDOMAIN: no such group or target.", nil, func(st pulsedns.Stats) uint64 { return st.NXDomain }),
		counter("pulse_dns_truncated_total", "DNS answers sent with the TC bit: too large for the client's UDP size; it retries over TCP.", nil, func(st pulsedns.Stats) uint64 { return st.Truncated }),
		counter("pulse_dns_malformed_total", "DNS messages that were not well-formed queries: answered FORMERR (no question or more than one, more than one OPT record, unparsable), or dropped when too short for a header.", nil, func(st pulsedns.Stats) uint64 { return st.Malformed }),
		counter("pulse_dns_panics_total", "DNS queries whose handling panicked, answered SERVFAIL; any is a bug, logged with its stack.", nil, func(st pulsedns.Stats) uint64 { return st.Panics }),
	)
}
