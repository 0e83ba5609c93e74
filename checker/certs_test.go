package checker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
	"github.com/pulsehealth/pulse/checker/probe"
)

// certProber passes and reports the certificate expiry the test sets, as
// the probe package's TLS probers do.
type certProber struct {
	mu       sync.Mutex
	notAfter time.Time
	warning  *probe.ExpiryError
	fresh    bool // the warning was not taken yet
}

func (p *certProber) Probe(context.Context) error { return nil }

func (p *certProber) LastCertExpiry() (time.Time, *probe.ExpiryError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notAfter, p.warning
}

func (p *certProber) NewCertWarning() *probe.ExpiryError {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.fresh {
		return nil
	}
	p.fresh = false
	return p.warning
}

// set makes the next probes see a certificate expiring at notAfter, with
// a new warning when warn (as the probe package's probers report one).
func (p *certProber) set(notAfter time.Time, warn bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notAfter, p.warning, p.fresh = notAfter, nil, warn
	if warn {
		p.warning = &probe.ExpiryError{NotAfter: notAfter, Left: notAfter.Sub(epoch), Warning: true}
	}
}

// A probe that passes within cert_expiry_warn shows in the status, and a
// new warning (as the prober hands it out, once) sends one CERT_EXPIRING
// event.
func TestCertExpiryWarning(t *testing.T) {
	clock := fakeclock.New(epoch)
	cp := &certProber{}
	c, err := checker.New(checker.Config{Clock: clock, NewProber: func(probe.Spec) (checker.Prober, error) { return cp, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := spec("web-1")
	s.Group, s.Interval, s.Timeout, s.Rise, s.Fall = "edge", time.Second, time.Second, 1, 1
	if _, _, err := c.Add(s); err != nil {
		t.Fatal(err)
	}
	w := watchNow(t, c, checker.Filter{})
	soon := epoch.Add(84 * time.Hour)
	probeOnce := func() checker.Status {
		t.Helper()
		clock.Advance(time.Second)
		c.RunRound(t.Context())
		st, err := c.Status("web-1")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	cp.set(soon, true)
	st := probeOnce()
	if st.CertWarning != "certificate expires in 3d12h (2026-01-04)" || !st.CertNotAfter.Equal(soon) {
		t.Errorf("status cert %v %q, want %v and the warning", st.CertNotAfter, st.CertWarning, soon)
	}
	probeOnce()
	probeOnce()
	evs := next(t, w)
	if diff := cmp.Diff([]string{"web-1: unhealthy -> healthy", "web-1: certificate expires in 3d12h (2026-01-04)"}, policyKinds(evs)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	if e := evs[1]; e.Kind != checker.EventCertExpiring || e.Target() != "web-1" || e.Group() != "edge" {
		t.Errorf("the warning event is %+v", e)
	}

	renewed := epoch.Add(90 * 24 * time.Hour)
	cp.set(renewed, false)
	if st := probeOnce(); st.CertWarning != "" || !st.CertNotAfter.Equal(renewed) {
		t.Errorf("after renewal: %v %q, want %v and no warning", st.CertNotAfter, st.CertWarning, renewed)
	}
	cp.set(soon, true)
	probeOnce()
	if diff := cmp.Diff([]string{"web-1: certificate expires in 3d12h (2026-01-04)"}, policyKinds(next(t, w))); diff != "" {
		t.Errorf("events after a new warning (-want +got):\n%s", diff)
	}
}
