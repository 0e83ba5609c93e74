package main

import "testing"

// Kept probe connections leave room under the open-file limit for every
// probe in flight and for pulsed's own files and clients.
func TestKeptConnections(t *testing.T) {
	for _, tc := range []struct {
		limit     uint64
		maxProbes int
		want      int
	}{
		{0, 256, 0},                   // unknown: the probe package's default
		{1024, 256, 1024 - 256 - 128}, // an eighth kept back for pulsed itself
		{256, 256, -1},                // no room: keep none
		{512, 0, 512 - 256 - 64},      // 0 probes: the checker's default 256; at least 64 kept back
		{20000, 256, 15000},           // three quarters at most
		{1 << 30, 256, 3 << 18},       // and never more than the probe package keeps
	} {
		got := keptConnections(tc.limit, tc.maxProbes)
		if got != tc.want {
			t.Errorf("keptConnections(%d, %d) = %d, want %d", tc.limit, tc.maxProbes, got, tc.want)
		}
		if got > 0 && uint64(got)+uint64(max(tc.maxProbes, 256)) >= tc.limit {
			t.Errorf("keptConnections(%d, %d) = %d leaves no room for the probes in flight", tc.limit, tc.maxProbes, got)
		}
	}
}

// The default bound on probes in flight follows the open-file limit: an
// eighth of it, from 256 to 4096; a bound that is set is used as it is.
func TestConcurrentProbes(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		n     int
		want  int
	}{
		{0, 0, 256},        // unknown limit
		{1024, 0, 256},     // systemd's default soft limit
		{20000, 0, 2500},   // an eighth
		{65536, 0, 4096},   // at most 4096
		{1 << 30, 0, 4096}, // however high the limit
		{20000, 64, 64},    // set
	} {
		if got := concurrentProbes(tc.limit, tc.n); got != tc.want {
			t.Errorf("concurrentProbes(%d, %d) = %d, want %d", tc.limit, tc.n, got, tc.want)
		}
		// The slots take nothing from the kept connections: as many are
		// kept as with a fixed 256.
		if kept, was := keptConnections(tc.limit, concurrentProbes(tc.limit, tc.n)), keptConnections(tc.limit, 256); tc.n == 0 && kept != was {
			t.Errorf("limit %d: %d connections kept, want %d as with 256 slots", tc.limit, kept, was)
		}
	}
}
