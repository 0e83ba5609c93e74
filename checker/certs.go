package checker

import (
	"time"

	"github.com/pulsehealth/pulse/checker/probe"
)

// certExpiryProber is a Prober that reports the certificates its last
// probe saw: the probe package's TLS probers (probe.CertExpiryReporter).
type certExpiryProber interface {
	LastCertExpiry() (time.Time, *probe.ExpiryError)
	NewCertWarning() *probe.ExpiryError
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

// certWarningLocked sends EventCertExpiring when t's last probe passed with
// a new certificate warning: the prober hands each out once, and again only
// after a probe passed outside the warning window (a renewed certificate
// that comes near expiry again warns again). The target keeps nothing: it
// is at its size class's limit.
func (r *registry) certWarningLocked(t *target, now time.Time) {
	cp, ok := t.prober.(certExpiryProber)
	if !ok {
		return
	}
	if w := cp.NewCertWarning(); w != nil {
		r.emitLocked(Event{Kind: EventCertExpiring, Time: now, Policy: PolicyChange{
			Group: t.spec.Group, Target: t.spec.Name, Text: t.spec.Name + ": " + w.Error(),
		}})
	}
}
