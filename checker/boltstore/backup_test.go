package boltstore_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
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
