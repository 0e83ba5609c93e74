package liveness

import (
	"context"
	"math"
	"runtime/metrics"
	"time"
)

// stallEvery is how often the stall sampler reads the Go scheduler's
// latencies.
const stallEvery = 250 * time.Millisecond

// SampleStalls reads the Go scheduler's latencies (runtime/metrics
// /sched/latencies:seconds) every quarter of a second until ctx ends, and
// calls note with the 99th percentile of the latencies of that quarter: how
// long runnable goroutines waited to run. A process short of CPU (a
// throttled container, a busy host, more probes than its cores can handle)
// shows it there before its probes time out.
func SampleStalls(ctx context.Context, note func(time.Duration)) {
	samples := [2][]metrics.Sample{{{Name: schedLatencies}}, {{Name: schedLatencies}}}
	metrics.Read(samples[0])
	tick := time.NewTicker(stallEvery)
	defer tick.Stop()
	for i := 1; ; i ^= 1 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		metrics.Read(samples[i]) // reuses the histogram read two quarters ago
		note(stallQuantile(samples[i^1][0].Value.Float64Histogram(), samples[i][0].Value.Float64Histogram(), 0.99))
	}
}

const schedLatencies = "/sched/latencies:seconds"

// stallQuantile returns the q-quantile of the latencies counted between
// prev and cur, two readings of one cumulative histogram: the lower bound
// of the bucket it falls in, so that it never overstates. 0 if none.
func stallQuantile(prev, cur *metrics.Float64Histogram, q float64) time.Duration {
	if prev == nil || cur == nil || len(prev.Counts) != len(cur.Counts) {
		return 0
	}
	var total uint64
	for i, n := range cur.Counts {
		total += n - prev.Counts[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range cur.Counts {
		if seen += n - prev.Counts[i]; seen >= rank {
			if lo := cur.Buckets[i]; lo > 0 {
				return time.Duration(lo * float64(time.Second))
			}
			return 0
		}
	}
	return 0
}
