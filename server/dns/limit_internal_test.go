package dns

import (
	"net/netip"
	"testing"
	"time"
)

func TestSourceLimiterIsBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newSourceLimiter(1, 2, 3, func() time.Time { return now })
	a := netip.MustParseAddr("127.0.0.1")
	if !l.allow(a) || !l.allow(a) || l.allow(a) {
		t.Fatal("a burst of 2 did not allow exactly 2")
	}
	for i := range 10 {
		l.allow(netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}))
		if n := l.sources(); n > 3 {
			t.Fatalf("%d sources tracked, bound 3", n)
		}
	}
	if n := l.sources(); n != 3 {
		t.Errorf("%d sources tracked after 11, want 3", n)
	}
}
