package pageout

import (
	"errors"
	"reflect"
	"testing"
)

func TestBinarySpans(t *testing.T) {
	const exe = "/opt/pulse bin/pulsed"
	maps := `00400000-010a6000 r-xp 00000000 fd:01 1234 /opt/pulse bin/pulsed
010a6000-020b0000 r--p 00ca6000 fd:01 1234 /opt/pulse bin/pulsed
020b0000-02161000 rw-p 01cb0000 fd:01 1234 /opt/pulse bin/pulsed
02161000-021a0000 rw-p 00000000 00:00 0 
c000000000-c004000000 rw-p 00000000 00:00 0 
7f0000000000-7f0000001000 r--p 00000000 fd:01 99 /opt/pulse bin/pulsed.old
7f0000001000-7f0000002000 r-xp 00000000 fd:01 98 /usr/lib/libc.so.6
7f0000002000-7f0000003000 ---p 00000000 fd:01 1234 /opt/pulse bin/pulsed
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
`
	got := binarySpans([]byte(maps), exe)
	want := []span{{0x400000, 0x10a6000}, {0x10a6000, 0x20b0000}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("binarySpans = %#x, want %#x (the binary's readable mappings that are not writable)", got, want)
	}
	if got := binarySpans([]byte(maps), "/opt/pulse"); got != nil {
		t.Errorf("binarySpans of a path that is a prefix of the binary's = %#x, want none", got)
	}
}

// fileSpanAt finds the read-only file mapping that holds an address, and
// nothing for a writable, anonymous or unmapped one.
func TestFileSpanAt(t *testing.T) {
	maps := `00400000-010a6000 r-xp 00000000 fd:01 1234 /opt/pulse/pulsed
7f0000000000-7f0000400000 r--s 00000000 fd:01 77 /var/lib/pulse/pulse db
7f0000400000-7f0000401000 rw-s 00000000 fd:01 78 /var/lib/pulse/other.db
7f0000401000-7f0000402000 r--p 00000000 00:00 0 
7ffd00000000-7ffd00021000 r--p 00000000 00:00 0                          [vvar]
`
	for _, tt := range []struct {
		addr uintptr
		want span
		ok   bool
	}{
		{0x7f0000000000, span{0x7f0000000000, 0x7f0000400000}, true},
		{0x7f00003fffff, span{0x7f0000000000, 0x7f0000400000}, true},
		{0x500000, span{0x400000, 0x10a6000}, true},
		{0x7f0000400000, span{}, false}, // writable
		{0x7f0000401800, span{}, false}, // anonymous
		{0x7ffd00000010, span{}, false}, // no file
		{0x10a6000, span{}, false},      // past the end
	} {
		got, ok := fileSpanAt([]byte(maps), tt.addr)
		if got != tt.want || ok != tt.ok {
			t.Errorf("fileSpanAt(%#x) = %#x, %v; want %#x, %v", tt.addr, got, ok, tt.want, tt.ok)
		}
	}
}

// Binary gives back the test binary's pages: what of them is resident
// falls.
func TestBinary(t *testing.T) {
	before, ok := ResidentFile(0)
	if !ok {
		t.Skip("RssFile is not in /proc/self/status")
	}
	res, err := Binary()
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("this kernel cannot page out on request: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after, _ := ResidentFile(0)
	t.Logf("paged out %d mappings, %d bytes: resident file pages %d -> %d KiB", res.Mappings, res.Bytes, before>>10, after>>10)
	if res.Mappings < 2 || res.Bytes == 0 {
		t.Errorf("Binary() = %+v, want at least the code and read-only data", res)
	}
	if after >= before*3/4 {
		t.Errorf("resident file pages went from %d to %d KiB, want less than three quarters", before>>10, after>>10)
	}
}
