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
