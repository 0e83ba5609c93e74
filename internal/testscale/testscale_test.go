package testscale

import (
	"testing"
	"time"
)

func TestD(t *testing.T) {
	base := 1.0
	if raceEnabled {
		base = raceFactor
	}
	for _, tc := range []struct {
		env  string
		want float64
	}{
		{"", base},
		{"2", 2 * base},
		{"0.5", 0.5 * base},
	} {
		t.Setenv(EnvVar, tc.env)
		if got, want := D(time.Second), time.Duration(tc.want*float64(time.Second)); got != want {
			t.Errorf("%s=%q: D(1s) = %v, want %v", EnvVar, tc.env, got, want)
		}
	}
}

func TestBadScalePanics(t *testing.T) {
	for _, env := range []string{"x", "0", "-1", "NaN", "1e9"} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(EnvVar, env)
			defer func() {
				if recover() == nil {
					t.Errorf("%s=%q: D did not panic", EnvVar, env)
				}
			}()
			D(time.Second)
		})
	}
}
