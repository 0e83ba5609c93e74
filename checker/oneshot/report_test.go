package oneshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	twenty := ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
	tests := []struct {
		name   string
		values []time.Duration
		p      int
		want   time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", ms(7), 95, 7 * time.Millisecond},
		{"self-check p50", ms(10, 350, 10, 10, 10), 50, 10 * time.Millisecond},
		{"self-check p95", ms(10, 350, 10, 10, 10), 95, 350 * time.Millisecond},
		{"p50 of 20 is rank 10", twenty, 50, 10 * time.Millisecond},
		{"p95 of 20 is rank 19", twenty, 95, 19 * time.Millisecond},
		{"p100 is the max", twenty, 100, 20 * time.Millisecond},
		{"p1 of 20 is rank 1", twenty, 1, 1 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tt.values...)
			if got := Percentile(tt.values, tt.p); got != tt.want {
				t.Errorf("Percentile(p%d) = %v, want %v", tt.p, got, tt.want)
			}
			for i := range before {
				if before[i] != tt.values[i] {
					t.Fatal("Percentile sorted its input")
				}
			}
		})
	}
}

// TestSummarizeIgnoresUnanswered: timeouts have no status, so they do not
// count in the percentiles; a run with none answered reports zero.
func TestSummarizeIgnoresUnanswered(t *testing.T) {
	s := Summarize([]Result{
		{Target: Target{Name: "a"}, Outcome: Down, Attempts: []Attempt{{Latency: time.Second}}},
		{Target: Target{Name: "b", Critical: true}, Outcome: Down},
	})
	if s.P50 != 0 || s.P95 != 0 || s.Down != 2 || len(s.CriticalDown) != 1 || s.CriticalDown[0] != "b" {
		t.Errorf("Summarize = %+v", s)
	}
	if s := Summarize(nil); s.CriticalDown == nil || s.Total != 0 {
		t.Errorf("Summarize(nil) = %+v, want an empty non-nil CriticalDown", s)
	}
}

func TestMetricsEscapeLabels(t *testing.T) {
	var b strings.Builder
	err := WriteMetrics(&b, []Result{{Target: Target{Name: "we\"ird\\na\nme"}, Outcome: Healthy, Attempts: []Attempt{{Latency: 1500 * time.Microsecond}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`healthcheck_up{target="we\"ird\\na\nme"} 1` + "\n",
		`healthcheck_latency_ms{target="we\"ird\\na\nme"} 1.500` + "\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("exposition lacks %q:\n%s", want, b.String())
		}
	}
}

// TestWriteMetricsFile: the file is replaced whole, readable by a collector
// running as another user, and no temporary file is left behind.
func TestWriteMetricsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "healthcheck.prom")
	if err := os.WriteFile(path, []byte("old content\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	results := []Result{{Target: Target{Name: "api"}, Outcome: Healthy, Attempts: []Attempt{{}}}}
	if err := WriteMetricsFile(path, results); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	WriteMetrics(&want, results)
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want.String() {
		t.Errorf("file holds %q (%v), want %q", got, err, want.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v (%v), want 0644", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the metrics file", len(entries))
	}

	if err := WriteMetricsFile(filepath.Join(dir, "missing", "x.prom"), results); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

func TestWriteMetricsFileRelative(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing")) // the temporary file is not made there
	if err := WriteMetricsFile("out.prom", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("out.prom"); err != nil {
		t.Error(err)
	}
}

// The temporary file is made beside the metrics file, so that the rename
// stays on one file system and is atomic: not in the working directory
// (here one that no longer exists).
func TestWriteMetricsFileTempBesideTarget(t *testing.T) {
	gone := t.TempDir()
	t.Chdir(gone)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "x.prom")
	if err := WriteMetricsFile(path, nil); err != nil {
		t.Fatalf("WriteMetricsFile(%s) from a removed working directory: %v", path, err)
	}
}

// A write that fails after the temporary file was made removes it.
func TestWriteMetricsFileCleansUpOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.prom")
	if err := os.MkdirAll(filepath.Join(path, "in-the-way"), 0o750); err != nil { // the rename cannot replace it
		t.Fatal(err)
	}
	if err := WriteMetricsFile(path, nil); err == nil {
		t.Fatal("renaming over a non-empty directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != "x.prom" {
		t.Errorf("after a failed write the directory holds %v, want only x.prom (the temporary file removed)", names)
	}
}
