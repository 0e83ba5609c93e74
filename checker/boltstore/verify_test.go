package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/pulsehealth/pulse/checker/boltstore"
)

// storeBytes is a bbolt file in memory, read just enough to damage it
// precisely: its page size and where the current meta page says the root
// bucket and the freelist are.
type storeBytes struct {
	b        []byte
	pageSize int
	root     uint64 // the root bucket's page
	freelist uint64
}

var ne = binary.NativeEndian

func readStore(t *testing.T, path string) *storeBytes {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A meta page: a 16-byte page header, then magic, version, page size,
	// flags (4 bytes each), the root bucket (root, sequence), freelist,
	// high water mark, txid (8 bytes each).
	pageSize := int(ne.Uint32(b[16+8:]))
	meta := b[16:]
	if m1 := b[pageSize+16:]; ne.Uint64(m1[48:]) > ne.Uint64(meta[48:]) {
		meta = m1
	}
	return &storeBytes{b: b, pageSize: pageSize, root: ne.Uint64(meta[16:]), freelist: ne.Uint64(meta[32:])}
}

func (s *storeBytes) page(id uint64) []byte { return s.b[int(id)*s.pageSize:][:s.pageSize] }

// bucketValue returns the root bucket's value for the named bucket: its
// root page id is the first 8 bytes.
func (s *storeBytes) bucketValue(t *testing.T, name string) []byte {
	t.Helper()
	p := s.page(s.root)
	if flags := ne.Uint16(p[8:]); flags != 0x02 {
		t.Fatalf("root bucket page %d has flags %#x, want a leaf page", s.root, flags)
	}
	for i := range int(ne.Uint16(p[10:])) {
		e := p[16+16*i:]
		pos, ksize, vsize := int(ne.Uint32(e[4:])), int(ne.Uint32(e[8:])), int(ne.Uint32(e[12:]))
		if k := e[pos : pos+ksize]; string(k) == name {
			return e[pos+ksize : pos+ksize+vsize]
		}
	}
	t.Fatalf("no bucket %q in the root bucket", name)
	return nil
}

func (s *storeBytes) write(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, s.b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// damageThatKilledTheProcess lists damage that bbolt does not check and
// that used to crash or hang the process: an 8 TB allocation, and cursors
// that descend forever. Each damages a store file in place and returns
// what the error must say.
var damageThatKilledTheProcess = []struct {
	name   string
	damage func(t *testing.T, s *storeBytes) []string
}{
	{"freelist count of 2^40", func(t *testing.T, s *storeBytes) []string {
		p := s.page(s.freelist)
		ne.PutUint16(p[10:], 0xFFFF) // the count is in the first element
		ne.PutUint64(p[16:], 1<<40)
		return []string{"freelist page", "1099511627776"}
	}},
	{"branch page whose child is itself", func(t *testing.T, s *storeBytes) []string {
		root := ne.Uint64(s.bucketValue(t, "specs"))
		p := s.page(root)
		if flags := ne.Uint16(p[8:]); flags != 0x01 {
			t.Fatalf("specs root page %d has flags %#x, want a branch page", root, flags)
		}
		ne.PutUint64(p[16+8:], root) // element 0's child
		return []string{"branch page " + itoa(root) + " (element 0) points at page " + itoa(root), "loop"}
	}},
	{"bucket root at the freelist page", func(t *testing.T, s *storeBytes) []string {
		ne.PutUint64(s.bucketValue(t, "specs"), s.freelist)
		return []string{`bucket "specs"`, "points at the freelist page " + itoa(s.freelist)}
	}},
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestDamageThatKilledTheProcessIsReported: a freelist that claims 2^40
// entries, a branch page whose child is itself and a bucket whose root is
// the freelist page are each refused at Open with an error wrapping
// ErrDamaged that names the page and the problem, promptly and without
// allocating more than a few megabytes.
func TestDamageThatKilledTheProcessIsReported(t *testing.T) {
	for _, tc := range damageThatKilledTheProcess {
		t.Run(tc.name, func(t *testing.T) {
			path := filledStore(t)
			s := readStore(t, path)
			orig := bytes.Clone(s.b)
			want := tc.damage(t, s)
			s.write(t, path)

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := readAll(filepath.Dir(path))
			runtime.ReadMemStats(&after)
			if !errors.Is(err, boltstore.ErrDamaged) {
				t.Fatalf("read the damaged store: %v, want an error wrapping ErrDamaged", err)
			}
			t.Log(err)
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
				t.Errorf("checking a %d-byte store allocated %d bytes", len(s.b), n)
			}
			// The damage was found before bbolt mapped the file, which
			// is not left locked: the undamaged bytes open in its place.
			if err := os.WriteFile(path, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := readAll(filepath.Dir(path)); err != nil {
				t.Errorf("reopen after restoring the file: %v", err)
			}
		})
	}
}

// TestFreelistCountInItsFirstElement: a freelist whose count is in its
// first element (the form bbolt writes for 65,535 free pages or more) is
// read as bbolt reads it, not refused.
func TestFreelistCountInItsFirstElement(t *testing.T) {
	path := filledStore(t)
	s := readStore(t, path)
	p := s.page(s.freelist)
	n := int(ne.Uint16(p[10:]))
	if n == 0 || n == 0xFFFF || 16+8*(n+1) > len(p) {
		t.Fatalf("the filled store's freelist has %d entries; the test needs 1 to a page's worth", n)
	}
	copy(p[24:], p[16:16+8*n])
	ne.PutUint64(p[16:], uint64(n))
	ne.PutUint16(p[10:], 0xFFFF)
	s.write(t, path)
	if err := readAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
}
