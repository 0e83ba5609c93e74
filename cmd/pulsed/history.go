package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/history"
)

// historyFile is the history's bbolt file in the data directory: apart
// from the targets' store, so that writing history never holds it.
const historyFile = "history.db"

// historyFlushEvery is how often the history is written to its file: at
// most this much is lost in a crash.
const historyFlushEvery = time.Minute

// histories is pulsed's recorder of targets' history (History, badges),
// and the goroutine that flushes it to its file.
type histories struct {
	rec    *history.Recorder
	db     *bolt.DB // nil: memory only
	cancel context.CancelFunc
	done   chan struct{}
}

// startHistory opens the history in dataDir, or keeps it in memory when
// dataDir is "", and flushes it each historyFlushEvery until stop. The
// history is derived data: it never stops pulsed (see openHistory).
func startHistory(dataDir string, logger *slog.Logger) *histories {
	logger = logger.With("component", "history")
	h := &histories{done: make(chan struct{})}
	if dataDir != "" {
		h.rec, h.db = openHistory(dataDir, logger)
	}
	if h.rec == nil {
		h.rec = history.New(history.Options{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		err := h.rec.Run(ctx, checker.RealClock{}, historyFlushEvery, func(err error) {
			logger.Warn("history not written; retrying in a minute", "error", err, "dropped_hours", h.rec.Dropped())
		})
		if err != nil {
			logger.Warn("history not written at shutdown", "error", err)
		}
	}()
	return h
}

// openHistory opens the history file in dataDir. A damaged file is moved
// aside (history.db.damaged-<time>) and the history starts afresh; a file
// that cannot be opened otherwise (locked, no permission) leaves the
// history in memory (nil results).
func openHistory(dataDir string, logger *slog.Logger) (*history.Recorder, *bolt.DB) {
	path := filepath.Join(dataDir, historyFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		logger.Error("history kept in memory only: cannot create the data directory", "error", err)
		return nil, nil
	}
	rec, db, err := tryOpenHistory(path)
	if err != nil && !errors.Is(err, bolterrors.ErrTimeout) && !errors.Is(err, fs.ErrPermission) {
		aside := path + ".damaged-" + time.Now().UTC().Format("20060102T150405Z")
		if rerr := os.Rename(path, aside); rerr == nil {
			logger.Error("history file damaged: moved aside, the history starts afresh", "path", path, "moved_to", aside, "error", err)
			rec, db, err = tryOpenHistory(path)
		}
	}
	if err != nil {
		logger.Error("history kept in memory only: cannot open its file", "path", path, "error", err)
		return nil, nil
	}
	logger.Info("history opened", "path", path, "targets", len(rec.Targets()))
	return rec, db
}

// tryOpenHistory opens the file at path and reads its targets; a panic of
// bbolt's on a damaged file is an error wrapping history.ErrDamaged.
func tryOpenHistory(path string) (rec *history.Recorder, db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			rec, db, err = nil, nil, fmt.Errorf("%w: %v", history.ErrDamaged, p)
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, nil, err
	}
	if rec, err = history.Open(db, history.Options{}); err != nil {
		db.Close()
		return nil, nil, err
	}
	return rec, db, nil
}

// observer returns what the checker tells of probes, transitions and
// removals: o's metrics and status page, and the history.
func (h *histories) observer(o checker.RemovalObserver) checker.Observer {
	return teeObserver{o, h.rec}
}

// stop writes what the history holds to its file and closes it. Call it
// once the checker is closed.
func (h *histories) stop() {
	h.cancel()
	<-h.done
	if h.db != nil {
		h.db.Close()
	}
}

// teeObserver tells two observers in turn.
type teeObserver struct{ a, b checker.RemovalObserver }

func (t teeObserver) ObserveProbe(s checker.Spec, r checker.Result) {
	t.a.ObserveProbe(s, r)
	t.b.ObserveProbe(s, r)
}

func (t teeObserver) ObserveTransition(tr checker.Transition) {
	t.a.ObserveTransition(tr)
	t.b.ObserveTransition(tr)
}

func (t teeObserver) ObserveRemoval(s checker.Spec) {
	t.a.ObserveRemoval(s)
	t.b.ObserveRemoval(s)
}

// ObservePolicy tells each observer that wants policy events (the
// history keeps panics and flapping in its timeline).
func (t teeObserver) ObservePolicy(k checker.EventKind, at time.Time, p checker.PolicyChange) {
	for _, o := range []checker.RemovalObserver{t.a, t.b} {
		if po, ok := o.(checker.PolicyObserver); ok {
			po.ObservePolicy(k, at, p)
		}
	}
}

// ObserveMembers tells each observer that wants members changes (the
// status page's feeds send their rows again: the owners moved).
func (t teeObserver) ObserveMembers() {
	for _, o := range []checker.RemovalObserver{t.a, t.b} {
		if mo, ok := o.(checker.MembersObserver); ok {
			mo.ObserveMembers()
		}
	}
}

// ObserveMode tells each observer that wants mode changes (the history
// keeps them in its timeline).
func (t teeObserver) ObserveMode(s checker.Spec, from checker.Mode, at time.Time) {
	for _, o := range []checker.RemovalObserver{t.a, t.b} {
		if mo, ok := o.(checker.ModeObserver); ok {
			mo.ObserveMode(s, from, at)
		}
	}
}
