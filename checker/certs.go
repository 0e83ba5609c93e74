package checker

import (
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// certExpiryProber is a Prober that reports the certificates its last
// probe saw: the probe package's TLS probers (probe.CertExpiryReporter).
type certExpiryProber interface {
	LastCertExpiry() (time.Time, *probe.ExpiryError)
}

// certExpiry returns what p's last probe saw of its server's certificate:
// when it expires and the warning, if any. A Prober that checks no
// certificate gives zero values. It does no I/O.
func certExpiry(p Prober) (notAfter time.Time, warning string) {
	cp, ok := p.(certExpiryProber)
	if !ok {
		return time.Time{}, ""
	}
	notAfter, w := cp.LastCertExpiry()
	if w != nil {
		warning = w.Error()
	}
	return notAfter, warning
}

// certWarningLocked sends EventCertExpiring when t's probe passed with a
// certificate warning it had not sent yet, and forgets the warning once a
// probe passes without one, so that a certificate renewed and then near
// expiry again warns again.
func (r *registry) certWarningLocked(t *target, res Result, now time.Time) {
	_, w := certExpiry(t.prober)
	switch {
	case w != "" && !t.certWarn:
		t.certWarn = true
		r.emitLocked(Event{Kind: EventCertExpiring, Time: now, Policy: PolicyChange{
			Group: t.spec.Group, Target: t.spec.Name, Text: t.spec.Name + ": " + w,
		}})
	case w == "" && res.Pass:
		t.certWarn = false
	}
}
