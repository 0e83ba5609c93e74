//go:build unix

package probe

import "syscall"

// openFileLimit returns the process's soft limit on open files (Go raises
// it to the hard limit at start), or 0 if unknown.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}
