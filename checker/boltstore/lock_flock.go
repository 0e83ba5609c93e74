//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package boltstore

import (
	"errors"
	"os"
	"syscall"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"
)

// lockFile takes the flock that bbolt takes on the store file (exclusive
// to write, shared to read), trying again every lockRetry for up to wait (0
// waits for ever). It fails with bbolt's ErrTimeout when another process
// keeps the file locked. Taken on the descriptor that bbolt is given, it
// makes bbolt's own flock succeed at once and lasts until bbolt closes it.
func lockFile(f *os.File, exclusive bool, wait time.Duration) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if wait != 0 && !time.Now().Before(deadline) {
			return bolterrors.ErrTimeout
		}
		time.Sleep(lockRetry)
	}
}
