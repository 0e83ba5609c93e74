package probe

import "testing"

// An id names its connection until it is dropped, and never the
// connection that takes its slot after: an epoll event read before a drop
// and handled after it finds nothing.
func TestConnTableStaleIDs(t *testing.T) {
	var tb connTable
	a, b := &asyncConn{fd: 1}, &asyncConn{fd: 2}
	ida, idb := tb.put(a), tb.put(b)
	if tb.get(ida) != a || tb.get(idb) != b || tb.len() != 2 {
		t.Fatalf("after two puts: %p %p (want %p %p), len %d", tb.get(ida), tb.get(idb), a, b, tb.len())
	}
	tb.drop(ida)
	if tb.get(ida) != nil || tb.len() != 1 {
		t.Fatalf("a dropped id finds %p, len %d", tb.get(ida), tb.len())
	}
	c := &asyncConn{fd: 3}
	idc := tb.put(c)
	if uint32(idc) != uint32(ida) {
		t.Fatalf("the free slot %d was not reused: %d", uint32(ida), uint32(idc))
	}
	if tb.get(ida) != nil || tb.get(idc) != c {
		t.Fatalf("after reuse: the old id finds %p, the new %p (want nil, %p)", tb.get(ida), tb.get(idc), c)
	}
	tb.drop(ida) // dropped before: leaves c alone
	if tb.get(idc) != c || tb.len() != 2 {
		t.Fatalf("dropping a stale id took %p's slot: len %d", c, tb.len())
	}
	if tb.get(uint64(7)<<32|99) != nil {
		t.Fatal("an id past the slots finds a connection")
	}
}
