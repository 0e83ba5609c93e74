package boltstore_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/liveness"
	"github.com/pulsehealth/pulse/checker/probe"
)

// payloadSpec is a spec with a 32 KiB request body.
func payloadSpec(name string) checker.Spec {
	return checker.Spec{Name: name, Probe: probe.Spec{HTTP: &probe.HTTPSpec{
		URL: "http://127.0.0.1:9/", Method: "POST", Body: strings.Repeat("x", 32<<10),
	}}}
}

// stuckWriter is an io.Writer that accepts its first write and then waits
// in the next one until released: a client that stopped reading.
type stuckWriter struct {
	first   bool
	writing chan struct{} // closed when the stuck write begins
	release chan struct{}
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	if !w.first {
		w.first = true
		return len(p), nil
	}
	close(w.writing)
	<-w.release
	return 0, io.ErrClosedPipe
}

// A backup whose writer stops accepting bytes keeps no write waiting, even
// writes that must grow (and so remap) the file; and the temporary copy is
// gone afterwards.
func TestBackupToAStuckWriterBlocksNoWrite(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	for i := range 20 {
		if err := s.PutSpec(payloadSpec(fmt.Sprintf("before-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	w := &stuckWriter{writing: make(chan struct{}), release: make(chan struct{})}
	backup := make(chan error, 1)
	go func() {
		_, err := s.Backup(w)
		backup <- err
	}()
	defer func() {
		close(w.release)
		if err := <-backup; err == nil {
			t.Error("Backup to a writer that failed returned no error")
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*backup*")); len(left) > 0 {
			t.Errorf("the backup's copy is left behind: %q", left)
		}
	}()
	<-w.writing

	// 200 specs of 32 KiB: the file grows by several megabytes, past
	// bbolt's mapping of it.
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		for i := range 200 {
			if err := s.PutSpec(payloadSpec(fmt.Sprintf("during-%03d", i))); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("writes are still waiting 30s after a backup's writer stopped")
	}
	fi2, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi2.Size() < 2*fi.Size() {
		t.Errorf("the file grew from %d to %d bytes only: the writes did not test a remap", fi.Size(), fi2.Size())
	}
}

// A Snapshot is the whole store at the time it was taken, however the
// store changes after.
func TestSnapshotIsConsistent(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	if err := s.PutSpec(payloadSpec("kept")); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if err := s.PutSpec(payloadSpec("later")); err != nil {
		t.Fatal(err)
	}
	backupDir := t.TempDir()
	f, err := os.Create(filepath.Join(backupDir, boltstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(f, snap)
	if err != nil || n != snap.Size() {
		t.Fatalf("copied %d bytes of %d: %v", n, snap.Size(), err)
	}
	f.Close()
	b := open(t, backupDir)
	defer b.Close()
	got, _, err := b.Load()
	if err != nil || len(got) != 1 || got[0].Spec.Name != "kept" {
		t.Errorf("the snapshot holds %d targets (%v), want kept alone", len(got), err)
	}
}

// A real bbolt read transaction held open while a write must grow the
// file keeps that write, and every write behind it, waiting: the checker's
// Watchdog reports the write lock stalled within its timeout, and clears
// it once the reader is gone and the writes complete.
func TestWatchdogSeesWritesHeldByAReader(t *testing.T) {
	s := open(t, t.TempDir())
	defer s.Close()
	c, err := checker.New(checker.Config{Store: s, NewProber: func(probe.Spec) (checker.Prober, error) { return nopProber{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const timeout = 2 * time.Second // on the real clock: a write takes milliseconds
	w, err := checker.NewWatchdog(c, liveness.Config{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	release, err := boltstore.HoldReadTx(s)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := func() { once.Do(release) }
	defer end()
	added := make(chan error, 1)
	go func() {
		for i := range 20 { // the first one already needs the file to grow
			if _, _, err := c.Add(payloadSpec(fmt.Sprintf("t-%02d", i))); err != nil {
				added <- err
				return
			}
		}
		added <- nil
	}()

	stalled := func() bool {
		return slices.ContainsFunc(w.Check(time.Now()), func(s liveness.Stall) bool { return s.Component == liveness.ComponentWriteLock })
	}
	start := time.Now()
	pollUntil(t, "the write lock to be reported", stalled)
	if took := time.Since(start); took > timeout+5*time.Second {
		t.Errorf("reported after %v, with a timeout of %v", took, timeout)
	}
	select {
	case err := <-added:
		t.Fatalf("the writes ended (%v) while a reader held the file: nothing was tested", err)
	default:
	}

	end()
	if err := <-added; err != nil {
		t.Fatalf("Add once the reader was gone: %v", err)
	}
	pollUntil(t, "the stall to clear", func() bool { return !stalled() })
}

// pollUntil polls cond until it holds, failing the test after a generous
// deadline.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type nopProber struct{}

func (nopProber) Probe(context.Context) error { return nil }
