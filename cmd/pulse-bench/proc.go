package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// procCPU returns the CPU time (user + system, every thread) the process
// has used, from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	user, sys, err := procTimes(pid)
	return user + sys, err
}

// procTimes returns the CPU time the process has used in user mode and in
// the kernel, every thread, from /proc/<pid>/stat.
func procTimes(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	return parseStatTimes(string(b))
}

// parseStatCPU reads utime and stime from the text of /proc/<pid>/stat
// and returns their sum.
func parseStatCPU(stat string) (time.Duration, error) {
	user, sys, err := parseStatTimes(stat)
	return user + sys, err
}

// parseStatTimes reads utime and stime (fields 14 and 15) from the text of
// /proc/<pid>/stat. The command name, field 2, is in parentheses and may
// hold spaces and parentheses itself, so fields are counted from the last
// ')'.
func parseStatTimes(stat string) (user, sys time.Duration, err error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("malformed stat: no ')' in %q", stat)
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is field 3 (state), so field k is fields[k-3].
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("malformed stat: %d fields after the command", len(fields))
	}
	var ticks [2]uint64
	for i, f := range fields[11:13] {
		if ticks[i], err = strconv.ParseUint(f, 10, 64); err != nil {
			return 0, 0, fmt.Errorf("malformed stat: utime/stime %q: %v", f, err)
		}
	}
	return time.Duration(ticks[0]) * time.Second / clockTicks, time.Duration(ticks[1]) * time.Second / clockTicks, nil
}

// procMem returns the resident set size and its peak (VmRSS, VmHWM) of the
// process, in bytes, from /proc/<pid>/status.
func procMem(pid int) (rss, peak uint64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	return parseStatusMem(f)
}

// parseStatusMem reads VmRSS and VmHWM from the text of
// /proc/<pid>/status ("VmRSS:	   12345 kB").
func parseStatusMem(r io.Reader) (rss, peak uint64, err error) {
	sc := bufio.NewScanner(r)
	var haveRSS bool
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(val), " ")
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil || unit != "kB" {
			return 0, 0, fmt.Errorf("malformed %s line %q", key, sc.Text())
		}
		if key == "VmRSS" {
			rss, haveRSS = n*1024, true
		} else {
			peak = n * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !haveRSS {
		return 0, 0, fmt.Errorf("no VmRSS in status")
	}
	return rss, peak, nil
}

// hostBusy returns the CPU time every CPU of the host has spent busy (not
// idle, not waiting for I/O), from the first line of /proc/stat.
func hostBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseHostBusy(string(b))
}

// parseHostBusy reads the "cpu ..." line of /proc/stat's text: user, nice,
// system, idle, iowait, irq, softirq, steal, in USER_HZ ticks; busy is all
// of them but idle and iowait (guest time is already in user).
func parseHostBusy(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("malformed /proc/stat line %q", line)
	}
	var busy uint64
	for i, f := range fields[1:9] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc/stat line %q: %v", line, err)
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}
