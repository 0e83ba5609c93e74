package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/internal/pageout"
)

// maxPageOutAfter bounds -page-out-after.
const maxPageOutAfter = 24 * time.Hour

// pageOutEvery is the longest gap between two page-outs.
const pageOutEvery = time.Hour

// nextPageOut returns how long after a page-out, elapsed after start, the
// next one is: as long again, so that they come at d, 2d, 4d, ... after
// start, and at most pageOutEvery. The early ones follow start-up and the
// first registrations closely; the later ones give back, within the hour,
// what a later one-off touched (a large registration, a reload), while
// the pages pulsed keeps using are read back seldom.
func nextPageOut(elapsed time.Duration) time.Duration { return min(elapsed, pageOutEvery) }

// pageOutAfter gives back the resident pages of pulsed's binary once d
// has passed, and again on nextPageOut's schedule (see package pageout),
// unless d is 0 or the returned stop is called first; with them, those of
// the store's file (nil: none), which registration read and little reads
// again. stop waits for a page-out in progress. The first page-out is
// logged at info, the later ones at debug.
func pageOutAfter(d time.Duration, logger *slog.Logger, store *boltstore.Store) (stop func()) {
	if d == 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(d)
		defer t.Stop()
		level, elapsed := slog.LevelInfo, d
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			before, _ := pageout.ResidentFile(0)
			res, err := pageout.Binary()
			switch {
			case errors.Is(err, pageout.ErrUnsupported):
				logger.Info("pulsed's binary stays resident: "+err.Error(), "page_out_after", d.String())
				return
			case err != nil:
				logger.Warn("could not page out pulsed's binary", "err", err)
			default:
				attrs := []any{"mapped_bytes", res.Bytes}
				if store != nil {
					n, err := store.PageOut()
					if err != nil {
						logger.Warn("could not page out the store's file", "path", store.Path(), "err", err)
					}
					attrs = append(attrs, "store_mapped_bytes", n)
				}
				after, _ := pageout.ResidentFile(0)
				attrs = append(attrs, "resident_file_bytes_before", before, "resident_file_bytes_after", after,
					"next_in", nextPageOut(elapsed).String())
				logger.Log(context.Background(), level, "paged out pulsed's binary: the pages it uses from now on are read back as it runs (-page-out-after)", attrs...)
			}
			level = slog.LevelDebug
			t.Reset(nextPageOut(elapsed))
			elapsed += nextPageOut(elapsed)
		}
	}()
	return func() { close(quit); <-done }
}
