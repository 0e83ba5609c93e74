// Package testscale stretches the real-time bounds of tests on slow runs.
//
// A test that waits for real I/O (a socket, a child process, a real probe)
// bounds the wait with D(bound) instead of bound, so one multiplier covers
// every such bound:
//
//   - under the race detector, bounds are 3 times as long;
//   - PULSE_TEST_SCALE (a positive float, e.g. 2.5) multiplies them again,
//     for a loaded or slow machine.
//
// Fake-clock durations are not real time and must not be scaled.
package testscale

import (
	"os"
	"strconv"
	"time"
)

// EnvVar names the environment variable read by Factor.
const EnvVar = "PULSE_TEST_SCALE"

// raceFactor is how much longer real-time bounds are under -race.
const raceFactor = 3

// Factor returns the multiplier D applies: 3 under the race detector, times
// PULSE_TEST_SCALE when it is set. It panics on a PULSE_TEST_SCALE that is
// not a positive number, so a typo cannot silently run with the default.
// It is safe for concurrent use.
func Factor() float64 {
	f := 1.0
	if raceEnabled {
		f = raceFactor
	}
	if s := os.Getenv(EnvVar); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || v > 1000 {
			panic(EnvVar + "=" + strconv.Quote(s) + ": want a positive number up to 1000")
		}
		f *= v
	}
	return f
}

// D returns d scaled by Factor. It is safe for concurrent use.
func D(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Factor())
}
