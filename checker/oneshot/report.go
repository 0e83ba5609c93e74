package oneshot

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Summary is the report of a run.
type Summary struct {
	// Healthy, Degraded and Down count the outcomes; Total is their sum.
	Healthy, Degraded, Down, Total int
	// CriticalDown names the critical targets that ended Down, in the
	// targets' order. Never nil.
	CriticalDown []string
	// P50 and P95 are nearest-rank percentiles of the last attempt's
	// latency, over the targets whose last attempt was answered (see
	// Attempt.Answered). Zero when there is none.
	P50, P95 time.Duration
	// TotalRetries is the sum of every target's retries.
	TotalRetries int
}

// Summarize reports on results.
func Summarize(results []Result) Summary {
	s := Summary{Total: len(results), CriticalDown: []string{}}
	var lat []time.Duration
	for _, r := range results {
		switch r.Outcome {
		case Healthy:
			s.Healthy++
		case Degraded:
			s.Degraded++
		default:
			s.Down++
			if r.Target.Critical {
				s.CriticalDown = append(s.CriticalDown, r.Target.Name)
			}
		}
		if last, ok := r.Last(); ok && last.Answered {
			lat = append(lat, last.Latency)
		}
		s.TotalRetries += r.Retries()
	}
	s.P50 = Percentile(lat, 50)
	s.P95 = Percentile(lat, 95)
	return s
}

// Percentile returns the nearest-rank p-th percentile of values (p in
// 1..100): the value at rank ceil(p/100 * n) of the sorted values. It
// returns 0 for no values and does not modify values.
func Percentile(values []time.Duration, p int) time.Duration {
	if len(values) == 0 {
		return 0
	}
	s := slices.Clone(values)
	slices.Sort(s)
	n := len(s)
	rank := (p*n + 99) / 100 // ceil in integers: 95% of 20 is rank 19, not 20
	return s[min(max(rank, 1), n)-1]
}

// WriteMetrics writes results in the Prometheus text exposition format, as
// node_exporter's textfile collector reads it: healthcheck_up (1 when the
// target ended Healthy or Degraded), healthcheck_latency_ms (the last
// attempt's latency; absent for a target with no attempt) and
// healthcheck_attempts_total, each with its HELP and TYPE lines and one
// sample per target labelled target="<name>".
func WriteMetrics(w io.Writer, results []Result) error {
	bw := bufio.NewWriter(w)
	fmt.Fprint(bw, "# HELP healthcheck_up 1 if the last attempt returned the expected status.\n"+
		"# TYPE healthcheck_up gauge\n")
	for _, r := range results {
		up := 0
		if r.Outcome == Healthy || r.Outcome == Degraded {
			up = 1
		}
		fmt.Fprintf(bw, "healthcheck_up{target=\"%s\"} %d\n", escapeLabel(r.Target.Name), up)
	}
	fmt.Fprint(bw, "# HELP healthcheck_latency_ms Latency of the last attempt in milliseconds.\n"+
		"# TYPE healthcheck_latency_ms gauge\n")
	for _, r := range results {
		if last, ok := r.Last(); ok {
			fmt.Fprintf(bw, "healthcheck_latency_ms{target=\"%s\"} %.3f\n", escapeLabel(r.Target.Name), Milliseconds(last.Latency))
		}
	}
	fmt.Fprint(bw, "# HELP healthcheck_attempts_total Attempts made in this run, including retries.\n"+
		"# TYPE healthcheck_attempts_total counter\n")
	for _, r := range results {
		fmt.Fprintf(bw, "healthcheck_attempts_total{target=\"%s\"} %d\n", escapeLabel(r.Target.Name), len(r.Attempts))
	}
	return bw.Flush()
}

// Milliseconds returns d in milliseconds.
func Milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// labelEscaper escapes a label value as the text format requires.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(v string) string { return labelEscaper.Replace(v) }

// WriteMetricsFile writes the metrics of results to path atomically: it
// writes a temporary file in the same directory, syncs it, makes it
// readable by others (0644, as a collector running as another user needs)
// and renames it over path, so a reader such as node_exporter's textfile
// collector sees the old file or the new one, never half of one. The
// temporary name starts with a dot and does not end in ".prom", so the
// collector never reads it.
func WriteMetricsFile(path string, results []Result) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := WriteMetrics(f, results); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
