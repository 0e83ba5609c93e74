package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

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
// dataDir is "". The history is derived data: a file that cannot be
// opened or read is logged and pulsed goes on with the history in memory.
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

func openHistory(dataDir string, logger *slog.Logger) (*history.Recorder, *bolt.DB) {
	path := filepath.Join(dataDir, historyFile)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		logger.Error("history kept in memory only: cannot create the data directory", "error", err)
		return nil, nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		logger.Error("history kept in memory only: cannot open its file", "path", path, "error", err)
		return nil, nil
	}
	rec, err := history.Open(db, history.Options{})
	if err != nil {
		db.Close()
		logger.Error("history kept in memory only: cannot read its file", "path", path, "error", err)
		return nil, nil
	}
	logger.Info("history opened", "path", path, "targets", len(rec.Targets()))
	return rec, db
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
