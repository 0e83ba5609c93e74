package pageout

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
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
		path := string(bytes.TrimLeft(line, " "))
		perms := f[1]
		if path != exe || len(perms) < 2 || perms[0] != 'r' || perms[1] == 'w' {
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
		spans = append(spans, span{uintptr(start), uintptr(end)})
	}
	return spans
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
