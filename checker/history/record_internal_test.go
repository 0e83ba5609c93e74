package history

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/fakeclock"
)

// TestRecordsRoundTrip: a day's hours and an hour's minutes read back as
// written, at the largest values they can hold and when sparse.
func TestRecordsRoundTrip(t *testing.T) {
	var day [24]hourSum
	day[3] = hourSum{count: 7, fails: 2, latSum: 12345}
	day[3].lat[1] = 7
	full := day
	for i := range full {
		h := &full[i]
		h.count, h.fails, h.latSum = ^uint32(0), ^uint32(0), ^uint64(0)
		for j := range h.lat {
			h.lat[j] = ^uint32(0)
		}
	}
	for _, d := range []*[24]hourSum{&day, &full} {
		var got [24]hourSum
		if err := decodeDay(appendDay(nil, d), &got); err != nil || got != *d {
			t.Errorf("day read back as %v (%v), want %v", got, err, *d)
		}
	}
	var mins [60]minute
	mins[0] = minute{count: 5, fails: 1}
	mins[59] = minute{count: 0xffff, fails: 0xffff}
	var got [60]minute
	if err := decodeMinutes(appendMinutes(nil, &mins), &got); err != nil || got != mins {
		t.Errorf("minutes read back as %v (%v), want %v", got, err, mins)
	}
}

// TestBadMinutesRecord: a minutes record with a value missing, one too
// many, a value cut short or nothing at all is refused, and leaves what it
// was read into as it was.
func TestBadMinutesRecord(t *testing.T) {
	var mins [60]minute
	mins[10] = minute{count: 3}
	good := appendMinutes(nil, &mins)
	big := binary.AppendUvarint(nil, 1<<20) // a multi-byte value, to cut
	for name, v := range map[string][]byte{
		"empty":      nil,
		"one short":  good[:len(good)-1],
		"one extra":  append(bytes.Clone(good), 0),
		"cut varint": append(bytes.Clone(good[:len(good)-1]), big[:len(big)-1]...),
	} {
		kept := [60]minute{{count: 9, fails: 9}}
		got := kept
		if err := decodeMinutes(v, &got); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: err %v, want errBadRecord", name, err)
		}
		if got != kept {
			t.Errorf("%s: the minutes read into changed", name)
		}
	}
}

// TestMemStoreKeepsWhatTheFileKeeps: in memory, as in a history file,
// the hourly prune leaves 30 days of day records, 24 hours of minutes and
// the last events, however long pulsed runs.
func TestMemStoreKeepsWhatTheFileKeeps(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(t0)
	st := newMemStore()
	r := newRecorder(Options{Clock: clock, MaxEvents: 4}, st)
	for h := range 40 * 24 {
		at := t0.Add(time.Duration(h) * time.Hour)
		r.ObserveProbe(checker.Spec{Name: "a", Group: "g"}, checker.Result{Pass: true, Latency: time.Millisecond, Time: at})
		r.ObserveTransition(checker.Transition{Target: "a", Group: "g", Time: at, Reason: "r"})
		clock.Advance(time.Hour)
		if err := r.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	s := st.series["a"]
	if s == nil {
		t.Fatal("no series kept")
	}
	days, _ := find(s.recs, minutesBase/2)
	hours := len(s.recs) - days
	if days != HourSlots/24 || hours != MinuteSlots/60 || len(s.events) != 4 {
		t.Fatalf("kept %d days, %d hours of minutes, %d events", days, hours, len(s.events))
	}
	if first, want := s.recs[0].key, dayKey((t0.Unix()/3600+40*24-HourSlots)/24); first != want {
		t.Errorf("oldest day kept is %d, want %d", first, want)
	}
	if first, want := s.recs[days].key, minutesKey(t0.Unix()/3600+40*24-MinuteSlots/60); first != want {
		t.Errorf("oldest hour of minutes kept is %d, want %d", first-minutesBase, want-minutesBase)
	}
}
