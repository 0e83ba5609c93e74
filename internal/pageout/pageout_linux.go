package pageout

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"iter"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Binary pages out the code and read-only data of the running binary
// (its mappings that are not writable). It also advises random access on
// them, so that a later fault reads back the page it needs, not the pages
// around it.
func Binary() (Result, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Result{}, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return Result{}, err
	}
	var res Result
	for _, s := range binarySpans(maps, exe) {
		if err := madvise(s, unix.MADV_RANDOM); err != nil {
			return res, err
		}
		if err := madvise(s, unix.MADV_PAGEOUT); err != nil {
			if errors.Is(err, syscall.EINVAL) {
				return res, ErrUnsupported
			}
			return res, err
		}
		res.Mappings++
		res.Bytes += uint64(s.end - s.start)
	}
	if res.Mappings == 0 {
		return res, fmt.Errorf("no mapping of %s in /proc/self/maps", exe)
	}
	return res, nil
}

// Mapping pages out the mapping that holds addr, which must be a
// read-only mapping of a file (a database a library maps to read it).
// The caller keeps the mapping from being unmapped or replaced until
// Mapping returns.
func Mapping(addr uintptr) (Result, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return Result{}, err
	}
	s, ok := fileSpanAt(maps, addr)
	if !ok {
		return Result{}, fmt.Errorf("no read-only mapping of a file holds %#x", addr)
	}
	if err := madvise(s, unix.MADV_PAGEOUT); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return Result{}, ErrUnsupported
		}
		return Result{}, err
	}
	return Result{Mappings: 1, Bytes: uint64(s.end - s.start)}, nil
}

func madvise(s span, advice int) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, uintptr(advice))
	if errno != 0 {
		return os.NewSyscallError("madvise", errno)
	}
	return nil
}

// span is a mapping's range of addresses, [start, end).
type span struct{ start, end uintptr }

// binarySpans returns the mappings in maps (the text of /proc/self/maps)
// of the file exe that are not writable.
func binarySpans(maps []byte, exe string) []span {
	var spans []span
	for m := range readOnlyMappings(maps) {
		if m.path == exe {
			spans = append(spans, m.span)
		}
	}
	return spans
}

// fileSpanAt returns the mapping in maps that holds addr, if it is a
// readable, not writable mapping of a file.
func fileSpanAt(maps []byte, addr uintptr) (span, bool) {
	for m := range readOnlyMappings(maps) {
		if m.start <= addr && addr < m.end && strings.HasPrefix(m.path, "/") {
			return m.span, true
		}
	}
	return span{}, false
}

// mapping is one line of /proc/self/maps: a range and what it maps.
type mapping struct {
	span
	path string
}

// readOnlyMappings yields the readable, not writable mappings in maps.
func readOnlyMappings(maps []byte) iter.Seq[mapping] {
	return func(yield func(mapping) bool) {
		sc := bufio.NewScanner(bytes.NewReader(maps))
		for sc.Scan() {
			// address perms offset dev inode path; the path may hold spaces.
			line := sc.Bytes()
			var f [5][]byte
			for i := range f {
				line = bytes.TrimLeft(line, " ")
				j := bytes.IndexByte(line, ' ')
				if j < 0 {
					j = len(line)
				}
				f[i], line = line[:j], line[j:]
			}
			perms := f[1]
			if len(perms) < 2 || perms[0] != 'r' || perms[1] == 'w' {
				continue
			}
			lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
			if !ok {
				continue
			}
			start, err1 := strconv.ParseUint(string(lo), 16, 64)
			end, err2 := strconv.ParseUint(string(hi), 16, 64)
			if err1 != nil || err2 != nil || end <= start {
				continue
			}
			if !yield(mapping{span{uintptr(start), uintptr(end)}, string(bytes.TrimLeft(line, " "))}) {
				return
			}
		}
	}
}

// ResidentFile returns how much of process pid's resident memory (0: this
// process's) is pages of files, its binary's among them (RssFile in
// /proc/PID/status).
func ResidentFile(pid int) (uint64, bool) {
	path := "/proc/self/status"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	status, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(status) {
		rest, ok := bytes.CutPrefix(line, []byte("RssFile:"))
		if !ok {
			continue
		}
		kb, ok := bytes.CutSuffix(bytes.TrimSpace(rest), []byte(" kB"))
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(kb)), 10, 64)
		return n << 10, err == nil
	}
	return 0, false
}
