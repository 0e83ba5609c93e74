package boltstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/boltstore"
	"github.com/pulsehealth/pulse/checker/probe"
)

// storeBytes is a bbolt file in memory, read just enough to damage it
// precisely: its page size and where the current meta page says the root
// bucket and the freelist are.
type storeBytes struct {
	b        []byte
	pageSize int
	meta     []byte // the current meta page, after its header
	root     uint64 // the root bucket's page
	freelist uint64
}

var ne = binary.NativeEndian

func readStore(t testing.TB, path string) *storeBytes {
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
	return &storeBytes{b: b, pageSize: pageSize, meta: meta, root: ne.Uint64(meta[16:]), freelist: ne.Uint64(meta[32:])}
}

// setMeta changes the current meta page and updates its checksum: an
// FNV-64a of its first 56 bytes.
func (s *storeBytes) setMeta(change func(m []byte)) {
	change(s.meta)
	h := fnv.New64a()
	h.Write(s.meta[:56])
	ne.PutUint64(s.meta[56:], h.Sum64())
}

// specsRoot returns the specs bucket's root page, a branch page.
func (s *storeBytes) specsRoot(t testing.TB) []byte {
	t.Helper()
	root := ne.Uint64(s.bucketValue(t, "specs"))
	p := s.page(root)
	if flags := ne.Uint16(p[8:]); flags != 0x01 {
		t.Fatalf("specs root page %d has flags %#x, want a branch page", root, flags)
	}
	return p
}

func (s *storeBytes) page(id uint64) []byte { return s.b[int(id)*s.pageSize:][:s.pageSize] }

// bucketValue returns the root bucket's value for the named bucket: its
// root page id is the first 8 bytes.
func (s *storeBytes) bucketValue(t testing.TB, name string) []byte {
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

// copyStore copies the store file at path into a new data dir and
// returns the copy's path.
func copyStore(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), boltstore.FileName)
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return cp
}

func (s *storeBytes) write(t testing.TB, path string) {
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
	damage func(t testing.TB, s *storeBytes) []string
}{
	{"freelist count of 2^40", func(t testing.TB, s *storeBytes) []string {
		p := s.page(s.freelist)
		ne.PutUint16(p[10:], 0xFFFF) // the count is in the first element
		ne.PutUint64(p[16:], 1<<40)
		return []string{"freelist page", "1099511627776"}
	}},
	{"branch page whose child is itself", func(t testing.TB, s *storeBytes) []string {
		p := s.specsRoot(t)
		root := ne.Uint64(p)
		ne.PutUint64(p[16+8:], root) // element 0's child
		return []string{"branch page " + itoa(root) + " (element 0) points at page " + itoa(root), "loop"}
	}},
	{"bucket root at the freelist page", func(t testing.TB, s *storeBytes) []string {
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
	filled := filledStore(t)
	for _, tc := range damageThatKilledTheProcess {
		t.Run(tc.name, func(t *testing.T) {
			path := copyStore(t, filled)
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

// TestDamageIsNamed: each check of the store file before bbolt reads it
// refuses its kind of damage with an error wrapping ErrDamaged that names
// the page and what is wrong with it.
func TestDamageIsNamed(t *testing.T) {
	filled := filledStore(t)
	freeIDs := func(t testing.TB, s *storeBytes, n int) []byte {
		p := s.page(s.freelist)
		if c := int(ne.Uint16(p[10:])); c < n || c == 0xFFFF {
			t.Fatalf("the filled store's freelist has %d entries; the test needs %d", c, n)
		}
		return p[16:]
	}
	firstLeaf := func(t testing.TB, s *storeBytes) (uint64, []byte) {
		p := s.specsRoot(t)
		for range 8 { // down the first children to a leaf
			if ne.Uint16(p[8:]) == 0x02 {
				return ne.Uint64(p), p
			}
			p = s.page(ne.Uint64(p[16+8:]))
		}
		t.Fatal("no leaf page under the specs root's first children")
		return 0, nil
	}
	for _, tc := range []struct {
		name   string
		damage func(t testing.TB, s *storeBytes) string
	}{
		{"high water mark past the end of the file", func(t testing.TB, s *storeBytes) string {
			pages := len(s.b) / s.pageSize
			s.setMeta(func(m []byte) { ne.PutUint64(m[40:], uint64(pages+10)) })
			return "the store has " + itoa(uint64(pages+10)) + " pages, but the file holds only " + itoa(uint64(pages))
		}},
		{"page size not a power of two", func(t testing.TB, s *storeBytes) string {
			s.setMeta(func(m []byte) { ne.PutUint32(m[8:], 3000) })
			return "page size 3000"
		}},
		{"freelist page that is not one", func(t testing.TB, s *storeBytes) string {
			ne.PutUint16(s.page(s.freelist)[8:], 0x02)
			return "page " + itoa(s.freelist) + ": a leaf page where a freelist page belongs"
		}},
		{"freelist lists a page twice", func(t testing.TB, s *storeBytes) string {
			ids := freeIDs(t, s, 2)
			copy(ids[8:16], ids[0:8])
			return "freelist page " + itoa(s.freelist) + ": lists page " + itoa(ne.Uint64(ids)) + " twice"
		}},
		{"freelist lists a page past the end", func(t testing.TB, s *storeBytes) string {
			ne.PutUint64(freeIDs(t, s, 1), 1<<40)
			return "lists page 1099511627776, which is not one of the store's pages"
		}},
		{"freelist lists a page in use", func(t testing.TB, s *storeBytes) string {
			root := ne.Uint64(s.specsRoot(t))
			ne.PutUint64(freeIDs(t, s, 1), root)
			return "points at page " + itoa(root) + ", which the freelist lists as free"
		}},
		{"page whose header names another", func(t testing.TB, s *storeBytes) string {
			p := s.specsRoot(t)
			id := ne.Uint64(p)
			ne.PutUint64(p, id+1)
			return "page " + itoa(id) + ": its header says it is page " + itoa(id+1)
		}},
		{"overflow past the end", func(t testing.TB, s *storeBytes) string {
			p := s.specsRoot(t)
			ne.PutUint32(p[12:], 1<<31)
			return "page " + itoa(ne.Uint64(p)) + ": its 2147483648 overflow pages run past the store's last page"
		}},
		{"bucket root at a meta page", func(t testing.TB, s *storeBytes) string {
			ne.PutUint64(s.bucketValue(t, "specs"), 1)
			return `bucket "specs" points at meta page 1`
		}},
		{"branch child past the end", func(t testing.TB, s *storeBytes) string {
			p := s.specsRoot(t)
			ne.PutUint64(p[16+16+8:], 1<<33) // element 1's child
			return "branch page " + itoa(ne.Uint64(p)) + " (element 1) points at page 8589934592, past the store's last page"
		}},
		{"more elements than the page holds", func(t testing.TB, s *storeBytes) string {
			id, p := firstLeaf(t, s)
			ne.PutUint16(p[10:], 0xFFF0)
			return "page " + itoa(id) + ": 65520 elements do not fit in its " + itoa(uint64(s.pageSize)) + " bytes"
		}},
		{"key outside its page", func(t testing.TB, s *storeBytes) string {
			id, p := firstLeaf(t, s)
			ne.PutUint32(p[16+4:], 0xFFFFFF00) // element 0's key position
			return "page " + itoa(id) + ": element 0: its key and value"
		}},
		{"inline bucket whose page is not a leaf", func(t testing.TB, s *storeBytes) string {
			v := s.bucketValue(t, "policies")
			if ne.Uint64(v) != 0 {
				t.Fatalf("the policies bucket has root page %d, want an inline bucket", ne.Uint64(v))
			}
			ne.PutUint16(v[16+8:], 0x01)
			return `bucket "policies": an inline bucket whose page is a branch page`
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := copyStore(t, filled)
			s := readStore(t, path)
			want := tc.damage(t, s)
			s.write(t, path)
			err := readAll(filepath.Dir(path))
			if !errors.Is(err, boltstore.ErrDamaged) || !strings.Contains(err.Error(), want) {
				t.Fatalf("read the damaged store: %v, want an error wrapping ErrDamaged that says %q", err, want)
			}
		})
	}
}

// TestStoreInUseIsNotChecked: the file is checked under its lock, so a
// store that another opener holds (and may be writing) is reported as
// locked, never as damaged from bytes read in the middle of a write.
func TestStoreInUseIsNotChecked(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	// What a reader without the lock could see: both meta pages half
	// written.
	overwrite(t, filepath.Join(dir, boltstore.FileName), 0, bytes.Repeat([]byte{0xAB}, 2*os.Getpagesize()))
	if _, err := boltstore.Open(dir, 50*time.Millisecond); !errors.Is(err, boltstore.ErrLocked) {
		t.Fatalf("Open of a store in use: %v, want ErrLocked", err)
	}
}

// TestPagesWithOverflowPass: a record larger than a page is stored on a
// page with overflow pages; the check reads them as bbolt does and the
// store opens with the record intact.
func TestPagesWithOverflowPass(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	big := checker.Spec{Name: "big", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1:8080/", Headers: map[string]string{"X-Big": strings.Repeat("x", 5*os.Getpagesize())}}}}
	for i := range 3 { // three versions: the older ones' pages are freed
		big.Group = itoa(uint64(i))
		if err := s.PutSpec(big); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Err != nil || got[0].Spec.Probe.HTTP.Headers["X-Big"] != big.Probe.HTTP.Headers["X-Big"] {
		t.Fatalf("Load: %d targets, want the big one intact", len(got))
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

// FuzzOpen opens and reads a small store with patches applied: each a
// 12-byte record of an offset (4 bytes, modulo the file's size) and 8 bytes
// to write there. Whatever the patches, reading gives the data, an error
// wrapping ErrDamaged or a record's decoding error, and never a crash, a
// hang or a large allocation. (Patches rather than the file itself keep
// the inputs, and their minimizing, small.)
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	s, err := boltstore.Open(dir, time.Second)
	if err != nil {
		f.Fatal(err)
	}
	var states []checker.StoredState
	for _, name := range []string{"web-1", "web-2", "db-1"} {
		sp := checker.Spec{Name: name, Group: "edge", Probe: probe.Spec{TCP: &probe.TCPSpec{Address: "127.0.0.1:9"}}, Interval: time.Second, Timeout: time.Second, Rise: 1, Fall: 1}
		if err := s.PutSpec(sp); err != nil {
			f.Fatal(err)
		}
		states = append(states, checker.StoredState{Name: name, State: checker.StateHealthy})
	}
	if err := s.CommitStates(states, nil, 3); err != nil {
		f.Fatal(err)
	}
	if err := s.PutGroupPolicy("edge", checker.GroupPolicy{MaxUnhealthyFraction: 0.5}); err != nil {
		f.Fatal(err)
	}
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	store := readStore(f, filepath.Join(dir, boltstore.FileName))
	patch := func(off int, v uint64) []byte {
		return ne.AppendUint64(ne.AppendUint32(nil, uint32(off)), v)
	}
	fl := int(store.freelist) * store.pageSize
	specs := len(store.b) - len(store.bucketValue(f, "specs"))
	f.Add([]byte{})
	f.Add(append(patch(fl+8, 0xFFFF_0010), patch(fl+16, 1<<40)...)) // count 0xFFFF, then 2^40 in the first slot
	f.Add(patch(specs, store.freelist))                             // the specs bucket's root at the freelist
	f.Add(patch(int(store.root)*store.pageSize, 1))                 // the root page says it is page 1
	f.Add(patch(16+40, 1<<20))                                      // meta 0's high water mark
	f.Fuzz(func(t *testing.T, patches []byte) {
		b := bytes.Clone(store.b)
		for ; len(patches) >= 12; patches = patches[12:] {
			off := int(ne.Uint32(patches) % uint32(len(b)-7))
			copy(b[off:], patches[4:12])
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, boltstore.FileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := readAll(dir)
		runtime.ReadMemStats(&after)
		if err != nil && !errors.Is(err, boltstore.ErrDamaged) && !strings.HasPrefix(err.Error(), "stored ") {
			t.Fatalf("read a patched store: %v, want nil, an error wrapping ErrDamaged or a record's error", err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<20 {
			t.Errorf("reading a %d-byte store allocated %d bytes", len(b), n)
		}
	})
}
