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
