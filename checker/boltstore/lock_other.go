//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package boltstore

import (
	"os"
	"time"
)

// lockFile does nothing here: bbolt locks the file another way after the
// check, which then reads it unlocked (a store that another process is
// writing at that moment can be reported as damaged).
func lockFile(*os.File, bool, time.Duration) error { return nil }
