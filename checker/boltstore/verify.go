package boltstore

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"time"
)

// This file checks a store file before bbolt maps it, for the damage that
// bbolt trusts and that crashes or hangs the process rather than panicking:
// a freelist whose count asks for terabytes, and a tree whose pages loop
// (a cursor descends forever, growing its stack until memory runs out).
// The check reads the file a page at a time; it keeps one bit per page, and
// one page per tree level.
//
// The layout is bbolt's file format version 2, in the machine's byte order
// (go.etcd.io/bbolt internal/common: page.go, meta.go, bucket.go):
//
//   - Every page starts with a 16-byte header: id (8 bytes), flags (2),
//     count (2), overflow (4). A page with overflow n spans n+1 pages.
//   - Pages 0 and 1 are meta pages. After the header: magic, version, page
//     size, flags (4 bytes each), the root bucket (root page, sequence), the
//     freelist's page, the high water mark (the number of pages in use), the
//     transaction id and an FNV-64a checksum of the 56 bytes before it (8
//     bytes each).
//   - A branch page holds count elements of 16 bytes: key position (4, from
//     the element), key size (4), child page (8).
//   - A leaf page holds count elements of 16 bytes: flags (4), key position
//     (4, from the element), key size (4), value size (4). An element with
//     flag 1 is a bucket: its value is the bucket's root page (8 bytes, 0
//     for an inline bucket) and sequence (8), then for an inline bucket a
//     leaf page (header and elements) in the value itself.
//   - The freelist page holds count page ids of 8 bytes; when count is
//     0xFFFF the real count is the first id slot and the ids follow it.
const (
	pageHeaderSize   = 16
	elementSize      = 16
	bucketHeaderSize = 16
	metaSize         = 64
	checksumOffset   = 56

	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	metaPageFlag     = 0x04
	freelistPageFlag = 0x10
	bucketLeafFlag   = 0x01

	boltMagic   = 0xED0CDAED
	boltVersion = 2
	noFreelist  = ^uint64(0)

	minPageSize = 1024     // the smallest page size bbolt looks for
	maxPageSize = 16 << 20 // the largest

	// maxDepth bounds the walk's recursion, tree levels and nested buckets
	// together. bbolt keeps its trees balanced with pages of many keys, so
	// a store of millions of keys is a few levels deep, and Pulse nests no
	// buckets; the visited pages already end any loop, and the bound keeps
	// a damaged chain of pages from taking the walk deep.
	maxDepth = 64
)

var ne = binary.NativeEndian

// lockRetry is how often a locked store file is tried again, as bbolt does.
const lockRetry = 50 * time.Millisecond

// openVerified returns a bolt.Options.OpenFile that opens the store file,
// takes its lock (waiting up to lockWait, 0 meaning for ever) and checks it
// with verifyFile before bbolt reads it. bbolt then takes the same lock on
// the same descriptor, which succeeds at once. The check's error is what
// bolt.Open returns; on it the file is closed, and so unlocked.
func openVerified(lockWait time.Duration) func(string, int, os.FileMode) (*os.File, error) {
	return func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		if err != nil {
			return nil, err
		}
		if err := lockFile(f, flag&(os.O_WRONLY|os.O_RDWR) != 0, lockWait); err != nil {
			f.Close()
			return nil, err
		}
		fi, err := f.Stat()
		if err == nil {
			err = verifyFile(f, fi.Size())
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
}

// verifyFile checks the store file r of size bytes as bbolt will read it:
// the meta page bbolt will use, the freelist it will load, and the tree of
// every bucket from the root, each page once. An empty file passes (bbolt
// writes a new store in it). The error names the page and what is wrong.
func verifyFile(r io.ReaderAt, size int64) error {
	if size == 0 {
		return nil
	}
	pageSize, err := pageSizeOf(r, size)
	if err != nil {
		return err
	}
	m, err := currentMeta(r, size, pageSize)
	if err != nil {
		return err
	}
	v := &verifier{r: r, pageSize: uint64(pageSize), hwm: m.hwm, freelist: m.freelist, freelistEnd: m.freelist}
	v.used, v.free = newBitset(m.hwm), newBitset(m.hwm)
	v.used.set(0)
	v.used.set(1)
	if m.freelist != noFreelist {
		if err := v.readFreelist(); err != nil {
			return err
		}
	}
	return v.walk(fmt.Sprintf("meta page %d: the root bucket", m.page), m.root, 0)
}

// meta is what the check needs of a meta page.
type meta struct {
	page                int // 0 or 1
	magic, version      uint32
	pageSize            uint32
	root, freelist, hwm uint64
	txid                uint64
	checksum, sum       uint64 // as stored, as computed
}

func parseMeta(page int, b []byte) meta {
	m := b[pageHeaderSize:][:metaSize]
	h := fnv.New64a()
	h.Write(m[:checksumOffset])
	return meta{
		page: page, magic: ne.Uint32(m[0:]), version: ne.Uint32(m[4:]), pageSize: ne.Uint32(m[8:]),
		root: ne.Uint64(m[16:]), freelist: ne.Uint64(m[32:]), hwm: ne.Uint64(m[40:]), txid: ne.Uint64(m[48:]),
		checksum: ne.Uint64(m[checksumOffset:]), sum: h.Sum64(),
	}
}

// valid is bbolt's own check of a meta page.
func (m meta) valid() bool {
	return m.magic == boltMagic && m.version == boltVersion && m.checksum == m.sum
}

// pageSizeOf finds the page size as bbolt does: from meta page 0 if it is
// valid, else from the first valid meta page at 1 KiB, 2 KiB, ... 16 MiB.
func pageSizeOf(r io.ReaderAt, size int64) (int, error) {
	buf := make([]byte, 0x1000)
	if n, _ := r.ReadAt(buf, 0); n == len(buf) {
		if m := parseMeta(0, buf); m.valid() {
			return checkPageSize(m, size)
		}
	}
	for i := range 15 {
		pos := int64(minPageSize) << i
		if pos >= size-minPageSize {
			break
		}
		clear(buf)
		if n, _ := r.ReadAt(buf, pos); n == len(buf) || int64(n) == size-pos {
			if m := parseMeta(1, buf); m.valid() {
				return checkPageSize(m, size)
			}
		}
	}
	return 0, fmt.Errorf("no valid meta page: not a bbolt file, or both meta pages are corrupted")
}

func checkPageSize(m meta, size int64) (int, error) {
	ps := m.pageSize
	if ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
		return 0, fmt.Errorf("meta page %d: page size %d is not a power of two from %d to %d", m.page, ps, minPageSize, maxPageSize)
	}
	if size < 2*int64(ps) {
		return 0, fmt.Errorf("the file is %d bytes, shorter than its two meta pages of %d", size, ps)
	}
	return int(ps), nil
}

// currentMeta returns the meta page bbolt will use (the valid one with the
// higher transaction id) after checking what bbolt trusts in it.
func currentMeta(r io.ReaderAt, size int64, pageSize int) (meta, error) {
	var ms [2]meta
	for i := range ms {
		buf := make([]byte, pageHeaderSize+metaSize)
		if _, err := r.ReadAt(buf, int64(i*pageSize)); err != nil {
			return meta{}, fmt.Errorf("read meta page %d: %w", i, err)
		}
		ms[i] = parseMeta(i, buf)
	}
	a, b := ms[0], ms[1]
	if b.txid > a.txid {
		a, b = b, a
	}
	m := a
	if !a.valid() {
		if !b.valid() {
			return meta{}, fmt.Errorf("neither meta page is valid")
		}
		m = b
	}
	pages := uint64(size) / uint64(pageSize)
	switch {
	case m.pageSize != uint32(pageSize):
		return m, fmt.Errorf("meta page %d: page size %d, but the file's pages are %d bytes", m.page, m.pageSize, pageSize)
	case m.hwm > pages:
		return m, fmt.Errorf("meta page %d: the store has %d pages, but the file holds only %d (truncated?)", m.page, m.hwm, pages)
	case m.root < 2 || m.root >= m.hwm:
		return m, fmt.Errorf("meta page %d: the root bucket's page %d is not one of the store's pages 2 to %d", m.page, m.root, int64(m.hwm)-1)
	case m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.hwm):
		return m, fmt.Errorf("meta page %d: the freelist's page %d is not one of the store's pages 2 to %d", m.page, m.freelist, int64(m.hwm)-1)
	}
	return m, nil
}

// verifier walks a store's pages; used has a bit for each page of a meta,
// the freelist or a tree seen so far, free for each page the freelist lists.
type verifier struct {
	r                     io.ReaderAt
	pageSize              uint64
	hwm                   uint64 // pages 0 to hwm-1 are the store's
	freelist, freelistEnd uint64 // the freelist's first and last page
	used, free            bitset
}

// readPage reads page id, checks its header (its own id, flags among
// want, its span within the store) and marks its span used.
func (v *verifier) readPage(id uint64, want uint16) ([]byte, error) {
	b := make([]byte, v.pageSize)
	if _, err := v.r.ReadAt(b, int64(id*v.pageSize)); err != nil {
		return nil, fmt.Errorf("read page %d: %w", id, err)
	}
	hid, flags, overflow := ne.Uint64(b), ne.Uint16(b[8:]), uint64(ne.Uint32(b[12:]))
	switch {
	case hid != id:
		return nil, fmt.Errorf("page %d: its header says it is page %d", id, hid)
	case flags&want == 0 || flags&(flags-1) != 0:
		return nil, fmt.Errorf("page %d: a %s page where a %s page belongs", id, pageType(flags), pageType(want))
	case overflow >= v.hwm-id:
		return nil, fmt.Errorf("page %d: its %d overflow pages run past the store's last page %d", id, overflow, v.hwm-1)
	}
	for o := id; o <= id+overflow; o++ {
		switch {
		case v.used.has(o):
			return nil, fmt.Errorf("page %d: its overflow covers page %d, which is already in use", id, o)
		case v.free.has(o):
			return nil, fmt.Errorf("page %d: is in use but the freelist lists page %d as free", id, o)
		}
		v.used.set(o)
	}
	if overflow > 0 {
		b = append(b, make([]byte, overflow*v.pageSize)...)
		if _, err := v.r.ReadAt(b[v.pageSize:], int64((id+1)*v.pageSize)); err != nil {
			return nil, fmt.Errorf("read page %d: %w", id, err)
		}
	}
	return b, nil
}

func pageType(flags uint16) string {
	switch flags {
	case branchPageFlag:
		return "branch"
	case leafPageFlag:
		return "leaf"
	case branchPageFlag | leafPageFlag:
		return "branch or leaf"
	case metaPageFlag:
		return "meta"
	case freelistPageFlag:
		return "freelist"
	}
	return fmt.Sprintf("unknown (flags %#x)", flags)
}

// readFreelist checks the freelist page: its count fits in its span, and
// every id is a page of the store, listed once, neither a meta page nor
// the freelist itself. It marks the freelist's span used and its ids free.
func (v *verifier) readFreelist() error {
	b, err := v.readPage(v.freelist, freelistPageFlag)
	if err != nil {
		return err
	}
	v.freelistEnd = v.freelist + uint64(len(b))/v.pageSize - 1
	slots := (uint64(len(b)) - pageHeaderSize) / 8
	first, count := uint64(0), uint64(ne.Uint16(b[10:]))
	if count == 0xFFFF { // the count is in the first slot
		first, count = 1, ne.Uint64(b[pageHeaderSize:])
	}
	if count > slots-first {
		return fmt.Errorf("freelist page %d: says it lists %d free pages, but its %d bytes hold at most %d", v.freelist, count, len(b), slots-first)
	}
	ids := b[pageHeaderSize+8*first:]
	for i := range count {
		id := ne.Uint64(ids[8*i:])
		switch {
		case id < 2 || id >= v.hwm:
			return fmt.Errorf("freelist page %d: lists page %d, which is not one of the store's pages 2 to %d", v.freelist, id, v.hwm-1)
		case id >= v.freelist && id <= v.freelistEnd:
			return fmt.Errorf("freelist page %d: lists its own page %d as free", v.freelist, id)
		case v.free.has(id):
			return fmt.Errorf("freelist page %d: lists page %d twice", v.freelist, id)
		}
		v.free.set(id)
	}
	return nil
}

// walk checks the reference from (a description of what points) to page
// id, then the tree below it: every page once, of the right type, its
// elements within it, and every bucket in its leaves.
func (v *verifier) walk(from string, id uint64, depth int) error {
	switch {
	case id < 2:
		return fmt.Errorf("%s points at meta page %d", from, id)
	case id >= v.hwm:
		return fmt.Errorf("%s points at page %d, past the store's last page %d", from, id, v.hwm-1)
	case v.freelist != noFreelist && id >= v.freelist && id <= v.freelistEnd:
		return fmt.Errorf("%s points at the freelist page %d", from, id)
	case v.used.has(id):
		return fmt.Errorf("%s points at page %d, which is already in the tree (a loop, or a page with two parents)", from, id)
	case v.free.has(id):
		return fmt.Errorf("%s points at page %d, which the freelist lists as free", from, id)
	case depth > maxDepth:
		return fmt.Errorf("%s points at page %d, %d levels deep: more than a store holds", from, id, depth)
	}
	b, err := v.readPage(id, branchPageFlag|leafPageFlag)
	if err != nil {
		return err
	}
	count := int(ne.Uint16(b[10:]))
	if pageHeaderSize+count*elementSize > len(b) {
		return fmt.Errorf("page %d: %d elements do not fit in its %d bytes", id, count, len(b))
	}
	if ne.Uint16(b[8:]) == leafPageFlag {
		return v.leaf(fmt.Sprintf("page %d", id), b, depth)
	}
	if count == 0 {
		return fmt.Errorf("page %d: a branch page with no children", id)
	}
	for i := range count {
		e := b[pageHeaderSize+i*elementSize:]
		if _, err := within(b, i, ne.Uint32(e), ne.Uint32(e[4:]), 0); err != nil {
			return fmt.Errorf("page %d: element %d: %w", id, i, err)
		}
		if err := v.walk(fmt.Sprintf("branch page %d (element %d)", id, i), ne.Uint64(e[8:]), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// leaf checks the elements of leaf page b (a page of the file, or an inline
// bucket's page, described by where) and walks the buckets among them.
func (v *verifier) leaf(where string, b []byte, depth int) error {
	count := int(ne.Uint16(b[10:]))
	for i := range count {
		e := b[pageHeaderSize+i*elementSize:]
		flags, pos, ksize, vsize := ne.Uint32(e), ne.Uint32(e[4:]), ne.Uint32(e[8:]), ne.Uint32(e[12:])
		kv, err := within(b, i, pos, ksize, vsize)
		if err != nil {
			return fmt.Errorf("%s: element %d: %w", where, i, err)
		}
		if flags&bucketLeafFlag == 0 {
			continue
		}
		key, val := kv[:ksize], kv[ksize:]
		bucket := fmt.Sprintf("%s: bucket %q", where, shorten(key))
		if len(val) < bucketHeaderSize {
			return fmt.Errorf("%s: its value is %d bytes, shorter than a bucket's header", bucket, len(val))
		}
		if root := ne.Uint64(val); root != 0 {
			if err := v.walk(bucket, root, depth+1); err != nil {
				return err
			}
			continue
		}
		inline := val[bucketHeaderSize:]
		switch {
		case len(inline) < pageHeaderSize:
			return fmt.Errorf("%s: an inline bucket of %d bytes, shorter than a page header", bucket, len(inline))
		case ne.Uint16(inline[8:]) != leafPageFlag:
			return fmt.Errorf("%s: an inline bucket whose page is a %s page, not a leaf page", bucket, pageType(ne.Uint16(inline[8:])))
		case pageHeaderSize+int(ne.Uint16(inline[10:]))*elementSize > len(inline):
			return fmt.Errorf("%s: %d elements do not fit in its inline page of %d bytes", bucket, ne.Uint16(inline[10:]), len(inline))
		case depth >= maxDepth:
			return fmt.Errorf("%s: buckets nested more than %d deep", bucket, maxDepth)
		}
		if err := v.leaf(bucket+" (inline)", inline, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// within returns the key and value of element i of page b, whose key is
// pos bytes after the element, after checking that they lie in the page.
func within(b []byte, i int, pos, ksize, vsize uint32) ([]byte, error) {
	start := uint64(pageHeaderSize+i*elementSize) + uint64(pos)
	end := start + uint64(ksize) + uint64(vsize)
	if end > uint64(len(b)) {
		return nil, fmt.Errorf("its key and value (bytes %d to %d) lie outside its page of %d bytes", start, end, len(b))
	}
	return b[start:end], nil
}

// shorten returns at most the first 40 bytes of a key, for a message.
func shorten(key []byte) []byte {
	if len(key) > 40 {
		return key[:40]
	}
	return key
}

// bitset has a bit for each page of the store.
type bitset []uint64

func newBitset(n uint64) bitset { return make(bitset, (n+63)/64) }

func (s bitset) has(i uint64) bool { return s[i/64]&(1<<(i%64)) != 0 }
func (s bitset) set(i uint64)      { s[i/64] |= 1 << (i % 64) }
