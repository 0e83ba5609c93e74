package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/pulsehealth/pulse/internal/pageout"
)

// maxPageOutAfter bounds -page-out-after.
const maxPageOutAfter = 24 * time.Hour

// pageOutAfter gives back the resident pages of pulsed's binary once d
// has passed (see package pageout), unless d is 0 or the returned stop
// is called first. stop waits for a page-out in progress.
func pageOutAfter(d time.Duration, logger *slog.Logger) (stop func()) {
	if d == 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(d)
		defer t.Stop()
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
		case err != nil:
			logger.Warn("could not page out pulsed's binary", "err", err)
		default:
			after, _ := pageout.ResidentFile(0)
			logger.Info("paged out pulsed's binary: the pages it uses from now on are read back as it runs (-page-out-after)",
				"mapped_bytes", res.Bytes, "resident_file_bytes_before", before, "resident_file_bytes_after", after)
		}
	}()
	return func() { close(quit); <-done }
}
