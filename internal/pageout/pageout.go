// Package pageout gives back the resident pages of the running program's
// own binary, or of a file it maps to read (Mapping).
//
// A Go program's start-up touches pages all over its binary: every
// package's initialisation, the registration of every generated
// message's descriptor, the type and method tables. The kernel maps the
// pages around each page touched as well, so once started most of the
// binary is resident, though the code that runs after start-up is a
// small part of it. Binary asks the kernel to reclaim those pages; the pages
// the program goes on using are read back as it touches them, and the
// rest, those only start-up used, stay on disk.
package pageout

import "errors"

// Result says what Binary gave back.
type Result struct {
	// Mappings is how many mappings of the binary were paged out: its
	// code and its read-only data.
	Mappings int
	// Bytes is their size, resident or not.
	Bytes uint64
}

// ErrUnsupported is returned where the kernel cannot page out a range
// of a process's own memory on request (Linux before 5.4, other systems).
var ErrUnsupported = errors.New("paging out the binary needs Linux 5.4 or later")
