package checker

import (
	"math"
	"testing"
	"time"
)

// The shared outcome bucket: full when never stored, refilled at the rate
// up to the burst, never refilled twice by a clock behind the stored time,
// and empty when the stored count makes no sense.
func TestOutcomeBucketTake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		b          outcomeBucket
		now        time.Time
		ok         bool
		wantTokens float64
		wantAt     time.Time
	}{
		{"never stored: full", outcomeBucket{}, t0, true, 3, t0},
		{"empty", outcomeBucket{tokens: 0.5, at: t0, rev: 7}, t0, false, 0.5, t0},
		{"refilled at the rate", outcomeBucket{tokens: 0.5, at: t0, rev: 7}, t0.Add(500 * time.Millisecond), true, 1.5, t0.Add(500 * time.Millisecond)},
		{"up to the burst", outcomeBucket{tokens: 0, at: t0, rev: 7}, t0.Add(time.Hour), true, 3, t0.Add(time.Hour)},
		{"a clock behind refills nothing", outcomeBucket{tokens: 1.5, at: t0, rev: 7}, t0.Add(-time.Second), true, 0.5, t0},
		{"NaN is empty", outcomeBucket{tokens: math.NaN(), at: t0, rev: 7}, t0, false, math.NaN(), t0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.b.take(tc.now, 4)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if got.tokens != tc.wantTokens || !got.at.Equal(tc.wantAt) || got.rev != tc.b.rev {
				t.Errorf("bucket %+v, want %v tokens at %v, rev %d", got, tc.wantTokens, tc.wantAt, tc.b.rev)
			}
		})
	}
}
