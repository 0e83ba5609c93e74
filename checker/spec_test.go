package checker_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// boundSpec is a valid spec with room around every bounded field: a 24h
// interval, a 1h timeout, flap damping and passive outcomes on.
func boundSpec() checker.Spec {
	s := spec("bounds")
	s.Interval, s.Timeout = checker.MaxInterval, checker.MaxTimeout
	s.Rise, s.Fall = 1, 1
	s.FlapThreshold, s.PassiveOutcomes = checker.MinFlapThreshold, true
	return s.WithDefaults(checker.StandardDefaults())
}

// Each bounded field of a Spec is accepted at its bound and rejected just
// past it, with a FieldError whose reason names the bound.
func TestSpecBounds(t *testing.T) {
	ns := time.Nanosecond
	tests := []struct {
		field   string
		ok, bad func(*checker.Spec)
		wantIn  string
	}{
		{"interval", func(s *checker.Spec) { s.Interval = checker.MaxInterval },
			func(s *checker.Spec) { s.Interval = checker.MaxInterval + ns }, "must be at most 24h0m0s, got 24h0m0.000000001s"},
		{"interval", func(s *checker.Spec) { s.Interval, s.Timeout = checker.MinInterval, checker.MinTimeout },
			func(s *checker.Spec) { s.Interval, s.Timeout = checker.MinInterval-ns, checker.MinTimeout-ns }, "must be at least 1ms, got 999.999µs"},
		{"timeout", func(s *checker.Spec) { s.Timeout = checker.MaxTimeout },
			func(s *checker.Spec) { s.Timeout = checker.MaxTimeout + ns }, "must be at most 1h0m0s, got 1h0m0.000000001s"},
		{"timeout", func(s *checker.Spec) { s.Timeout = checker.MinTimeout },
			func(s *checker.Spec) { s.Timeout = checker.MinTimeout - ns }, "must be at least 1ms, got 999.999µs"},
		{"timeout", func(s *checker.Spec) { s.Interval, s.Timeout = time.Second, time.Second },
			func(s *checker.Spec) { s.Interval, s.Timeout = time.Second, time.Second+ns }, "must be at most the interval (1s)"},
		{"max_latency", func(s *checker.Spec) { s.MaxLatency = s.Timeout },
			func(s *checker.Spec) { s.MaxLatency = s.Timeout + ns }, "must be at most the timeout (1h0m0s)"},
		{"fast_interval", func(s *checker.Spec) { s.FastInterval = checker.MaxInterval },
			func(s *checker.Spec) { s.FastInterval = checker.MaxInterval + ns }, "must be at most 24h0m0s"},
		{"fast_interval", func(s *checker.Spec) { s.FastInterval = s.Timeout },
			func(s *checker.Spec) { s.FastInterval = s.Timeout - ns }, "must be at least the timeout (1h0m0s)"},
		{"down_interval", func(s *checker.Spec) { s.DownInterval = checker.MaxInterval },
			func(s *checker.Spec) { s.DownInterval = checker.MaxInterval + ns }, "must be at most 24h0m0s"},
		{"down_interval", func(s *checker.Spec) { s.DownInterval = s.Timeout },
			func(s *checker.Spec) { s.DownInterval = s.Timeout - ns }, "must be at least the timeout (1h0m0s)"},
		{"flap_window", func(s *checker.Spec) { s.FlapWindow = checker.MaxFlapWindow },
			func(s *checker.Spec) { s.FlapWindow = checker.MaxFlapWindow + ns }, "must be at most 24h0m0s"},
		{"flap_stable_for", func(s *checker.Spec) { s.FlapStableFor = checker.MaxFlapStableFor },
			func(s *checker.Spec) { s.FlapStableFor = checker.MaxFlapStableFor + ns }, "must be at most 24h0m0s"},
		{"rise", func(s *checker.Spec) { s.Rise = checker.MaxRise },
			func(s *checker.Spec) { s.Rise = checker.MaxRise + 1 }, "must be between 1 and 1000, got 1001"},
		{"rise", func(s *checker.Spec) { s.Rise = 1 },
			func(s *checker.Spec) { s.Rise = 0 }, "must be between 1 and 1000, got 0"},
		{"fall", func(s *checker.Spec) { s.Fall = checker.MaxFall },
			func(s *checker.Spec) { s.Fall = checker.MaxFall + 1 }, "must be between 1 and 1000, got 1001"},
		{"fall", func(s *checker.Spec) { s.Fall = 1 },
			func(s *checker.Spec) { s.Fall = 0 }, "must be between 1 and 1000, got 0"},
		{"flap_threshold", func(s *checker.Spec) { s.FlapThreshold = checker.MaxFlapThreshold },
			func(s *checker.Spec) { s.FlapThreshold = checker.MaxFlapThreshold + 1 }, "must be at most 256 (the transitions a target remembers), got 257"},
		{"passive_rate", func(s *checker.Spec) { s.PassiveRate = checker.MaxPassiveRate },
			func(s *checker.Spec) { s.PassiveRate = checker.MaxPassiveRate + 1 }, "must be at most 10000 a second, got 10001"},
		{"http.url", func(s *checker.Spec) { s.Probe.TCP = nil; s.Probe.HTTP = httpURL(2048) },
			func(s *checker.Spec) { s.Probe.TCP = nil; s.Probe.HTTP = httpURL(2049) }, "must be at most 2048 bytes, got 2049"},
	}
	for _, tt := range tests {
		t.Run(tt.field+" "+tt.wantIn, func(t *testing.T) {
			ok := boundSpec()
			tt.ok(&ok)
			if err := ok.Validate(); err != nil {
				t.Errorf("at the bound: %v", err)
			}
			bad := boundSpec()
			tt.bad(&bad)
			err := bad.Validate()
			var fe *checker.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field || !strings.Contains(fe.Reason, tt.wantIn) {
				t.Errorf("past the bound: %v, want a FieldError on %s containing %q", err, tt.field, tt.wantIn)
			}
		})
	}
}

func httpURL(n int) *probe.HTTPSpec {
	const head = "http://x/"
	return &probe.HTTPSpec{URL: head + strings.Repeat("a", n-len(head))}
}

// Defaults (pulsed's -interval, -timeout, -rise, -fall, -fast-interval,
// -down-interval) have the bounds of the fields they fill.
func TestDefaultsBounds(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*checker.Defaults)
		wantIn string // "" means valid
	}{
		{"standard", func(d *checker.Defaults) {}, ""},
		{"largest", func(d *checker.Defaults) {
			d.Interval, d.Timeout, d.Rise, d.Fall = checker.MaxInterval, checker.MaxTimeout, checker.MaxRise, checker.MaxFall
			d.FastInterval, d.DownInterval = checker.MaxInterval, checker.MaxInterval
		}, ""},
		{"smallest", func(d *checker.Defaults) {
			d.Interval, d.Timeout, d.Rise, d.Fall = checker.MinInterval, checker.MinTimeout, 1, 1
			d.FastInterval, d.DownInterval = checker.MinTimeout, checker.MinTimeout
		}, ""},
		{"interval too long", func(d *checker.Defaults) { d.Interval = math.MaxInt64 }, "default interval must be between 1ms and 24h0m0s, got 2562047h47m16.854775807s"},
		{"interval too short", func(d *checker.Defaults) { d.Interval = time.Microsecond }, "default interval must be between 1ms and 24h0m0s, got 1µs"},
		{"timeout too long", func(d *checker.Defaults) { d.Interval, d.Timeout = checker.MaxInterval, 2*time.Hour }, "default timeout must be between 1ms and 1h0m0s, got 2h0m0s"},
		{"timeout over the interval", func(d *checker.Defaults) { d.Timeout = 3 * time.Second }, "default timeout must be at most the default interval 2s, got 3s"},
		{"rise too high", func(d *checker.Defaults) { d.Rise = 1001 }, "default rise must be between 1 and 1000, got 1001"},
		{"fall zero", func(d *checker.Defaults) { d.Fall = 0 }, "default fall must be between 1 and 1000, got 0"},
		{"fast under the timeout", func(d *checker.Defaults) { d.FastInterval = 500 * time.Millisecond }, "default fast interval must be at least the default timeout 1s (0: each target's interval), got 500ms"},
		{"down too long", func(d *checker.Defaults) { d.DownInterval = 48 * time.Hour }, "default down interval must be at most 24h0m0s, got 48h0m0s"},
		{"down negative", func(d *checker.Defaults) { d.DownInterval = -time.Second }, "default down interval must not be negative"},
	}
	for _, tt := range tests {
		d := checker.StandardDefaults()
		tt.edit(&d)
		err := d.Validate()
		switch {
		case tt.wantIn == "" && err != nil:
			t.Errorf("%s: %v, want valid", tt.name, err)
		case tt.wantIn != "" && (err == nil || !strings.Contains(err.Error(), tt.wantIn)):
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.wantIn)
		}
		if tt.wantIn == "" {
			if _, err := checker.New(checker.Config{Defaults: d}); err != nil {
				t.Errorf("%s: New: %v", tt.name, err)
			}
		}
	}
}

// The largest accepted values of every field, filled in by defaults or
// set, make a valid spec: the bounds are consistent with one another.
func TestLargestSpecIsValid(t *testing.T) {
	s := largestSpec("big")
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

// largestSpec sets every bounded field of a spec to its largest accepted
// value.
func largestSpec(name string) checker.Spec {
	s := spec(name)
	s.Interval, s.Timeout, s.MaxLatency = checker.MaxInterval, checker.MaxTimeout, checker.MaxTimeout
	s.FastInterval, s.DownInterval = checker.MaxInterval, checker.MaxInterval
	s.Rise, s.Fall = checker.MaxRise, checker.MaxFall
	s.FlapWindow, s.FlapStableFor, s.FlapThreshold = checker.MaxFlapWindow, checker.MaxFlapStableFor, checker.MaxFlapThreshold
	s.PassiveOutcomes, s.PassiveRate = true, checker.MaxPassiveRate
	return s.WithDefaults(checker.StandardDefaults())
}
