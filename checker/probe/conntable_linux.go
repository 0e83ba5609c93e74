package probe

// connTable holds the registered connections, each in a slot its id
// names: an epoll event carries the id, and finding its connection is an
// index into an array where a map would hash. The id's high half counts
// the uses of its slot, so that an event for a connection since dropped
// never finds the one that took its slot.
type connTable struct {
	slots []*asyncConn
	uses  []uint32 // by slot
	free  []uint32 // empty slots
}

// put holds ac in a free slot and returns its id.
func (t *connTable) put(ac *asyncConn) uint64 {
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		i = uint32(len(t.slots))
		t.slots, t.uses = append(t.slots, nil), append(t.uses, 0)
	}
	t.slots[i] = ac
	t.uses[i]++
	return uint64(t.uses[i])<<32 | uint64(i)
}

// get returns the connection of id, or nil when it was dropped.
func (t *connTable) get(id uint64) *asyncConn {
	i := uint32(id)
	if int(i) >= len(t.slots) || t.uses[i] != uint32(id>>32) {
		return nil
	}
	return t.slots[i]
}

// len returns how many connections are held.
func (t *connTable) len() int { return len(t.slots) - len(t.free) }

// drop frees id's slot; an id already dropped is left alone.
func (t *connTable) drop(id uint64) {
	if t.get(id) == nil {
		return
	}
	i := uint32(id)
	t.slots[i] = nil
	t.free = append(t.free, i)
}
