package boltstore_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
	"github.com/pulsehealth/pulse/internal/pageout"
)

// mappedRss returns how much of this process's mappings of the file at
// path is resident, from /proc/self/smaps.
func mappedRss(t *testing.T, path string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	var total uint64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasSuffix(line, " "+path)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "Rss:"); ok && in {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			total += kb << 10
		}
	}
	return total
}

// PageOut gives back the store's mapped pages that loading read, and the
// store reads the same targets afterwards.
func TestPageOut(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	var specs []checker.Spec
	for i := range 5000 {
		specs = append(specs, checker.Spec{Name: fmt.Sprintf("web-%05d", i), Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: fmt.Sprintf("http://127.0.0.1:%d/healthz", 10000+i)}},
			Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1})
	}
	if err := s.PutSpecs(specs); err != nil {
		t.Fatal(err)
	}
	loaded, _, err := s.Load()
	if err != nil || len(loaded) != len(specs) {
		t.Fatalf("Load() = %d targets, %v; want %d", len(loaded), err, len(specs))
	}
	before := mappedRss(t, s.Path())
	n, err := s.PageOut()
	if errors.Is(err, pageout.ErrUnsupported) {
		t.Skipf("this kernel cannot page out on request: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := mappedRss(t, s.Path())
	t.Logf("mapping of %d bytes: resident %d KiB before, %d after", n, before>>10, after>>10)
	if before < 256<<10 || n < before {
		t.Fatalf("loading 5,000 targets left %d KiB of a %d-byte mapping resident: the test needs more", before>>10, n)
	}
	if after >= before/2 {
		t.Errorf("the store's resident pages went from %d to %d KiB, want less than half", before>>10, after>>10)
	}
	again, _, err := s.Load()
	if err != nil || len(again) != len(specs) {
		t.Fatalf("Load() after the page-out = %d targets, %v; want %d", len(again), err, len(specs))
	}
}
