package boltstore_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/probe"
)

// readAll opens the store in dir and reads everything in it, as pulsed does
// at start.
func readAll(dir string) error {
	s, err := boltstore.Open(dir, time.Second)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, _, err := s.Load(); err != nil {
		return err
	}
	_, err = s.LoadGroupPolicies()
	return err
}

// filledStore writes a store with enough targets to span many pages and
// returns its file's path.
func filledStore(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir)
	var states []checker.StoredState
	for i := range 400 {
		name := "web-" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		sp := checker.Spec{Name: name, Group: "edge", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1:8080/" + name}},
			Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
		if err := s.PutSpec(sp); err != nil {
			t.Fatal(err)
		}
		states = append(states, checker.StoredState{Name: name, State: checker.StateHealthy})
	}
	if err := s.CommitStates(states, nil, 7); err != nil {
		t.Fatal(err)
	}
	if err := s.PutGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, boltstore.FileName)
}

// TestDamagedFilesGiveAClearError: a truncated, random, page-corrupted or
// foreign file is never a panic: Open or a read returns an error wrapping
// ErrDamaged that names the file and says what to do.
func TestDamagedFilesGiveAClearError(t *testing.T) {
	pageSize := os.Getpagesize()
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"truncated to half a page", func(t *testing.T, path string) {
			if err := os.Truncate(path, int64(pageSize/2)); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated after the meta pages", func(t *testing.T, path string) {
			if err := os.Truncate(path, int64(3*pageSize)); err != nil {
				t.Fatal(err)
			}
		}},
		{"random bytes", func(t *testing.T, path string) {
			if err := os.WriteFile(path, garbage(16*pageSize), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"a foreign file", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("targets:\n  - name: web-1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"both meta pages corrupted", func(t *testing.T, path string) {
			overwrite(t, path, 0, garbage(2*pageSize))
		}},
		{"every data page corrupted", func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			overwrite(t, path, int64(2*pageSize), garbage(int(fi.Size())-2*pageSize))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filledStore(t)
			tc.damage(t, path)
			err := readAll(filepath.Dir(path))
			if !errors.Is(err, boltstore.ErrDamaged) {
				t.Fatalf("read a damaged store: %v, want an error wrapping ErrDamaged", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, path+" is damaged (") || !strings.Contains(msg, `restore a backup (docs/operations/durability.md, "Backup") or move it away`) {
				t.Errorf("error %q does not name the file and say what to do", msg)
			}
		})
	}
}

// TestDamagedPagesNeverPanic corrupts one page at a time: whatever bbolt
// makes of it, reading the store returns (an error or the data) and never
// panics.
func TestDamagedPagesNeverPanic(t *testing.T) {
	pageSize := os.Getpagesize()
	path := filledStore(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pages := len(orig) / pageSize
	if pages < 8 {
		t.Fatalf("the filled store has %d pages; the test needs more", pages)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	damaged := 0
	for p := range pages {
		b := append([]byte(nil), orig...)
		for i := p * pageSize; i < (p+1)*pageSize; i++ {
			b[i] = byte(rng.UintN(256))
		}
		// A fresh dir each time: a store bbolt panicked on stays locked.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, boltstore.FileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		err := readAll(dir) // a panic fails the test
		if errors.Is(err, boltstore.ErrDamaged) {
			damaged++
		} else if err != nil {
			t.Errorf("page %d corrupted: %v, want nil or an error wrapping ErrDamaged", p, err)
		}
	}
	if damaged == 0 {
		t.Errorf("none of %d corrupted pages was reported as damage", pages)
	}
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
