//go:build !linux

package pageout

// Binary pages out nothing here: it needs Linux's madvise(MADV_PAGEOUT).
func Binary() (Result, error) { return Result{}, ErrUnsupported }

// ResidentFile is not known here.
func ResidentFile(int) (uint64, bool) { return 0, false }

// Mapping pages out nothing here: it needs Linux's madvise(MADV_PAGEOUT).
func Mapping(uintptr) (Result, error) { return Result{}, ErrUnsupported }
