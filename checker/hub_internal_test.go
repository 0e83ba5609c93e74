package checker

import (
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/pulsehealth/pulse/checker/outlier"
)

// The watch history keeps each event's own payload alone, and gives back
// the event as it was published, for every kind; a kept event is a small
// fraction of an Event.
func TestHistoryKeepsEventsWhole(t *testing.T) {
	at := time.Unix(1_800_000_000, 0).UTC()
	st := Status{Spec: Spec{Name: "web-1", Group: "edge"}, State: StateHealthy, Routable: true, Weight: 100}
	var evs []Event
	for k := EventTransition; k <= EventOutlierEnded; k++ {
		e := Event{Kind: k, Time: at}
		switch {
		case k == EventTransition:
			e.Transition = Transition{Target: "web-1", Group: "edge", From: StateUnhealthy, To: StateHealthy, Time: at,
				Reason: "vantages: a=healthy b=healthy", Vantages: []VantageVerdict{{Member: "r1", Label: "a", State: StateHealthy}}}
		case k.IsPolicy():
			e.Policy = PolicyChange{Group: "edge", Target: "web-1", Text: k.String(), Held: []string{"web-2"},
				Outlier: &outlier.State{Reason: "p50 38ms vs group 4ms", Since: at}}
		default:
			e.Status = st
			if k == EventModeChanged {
				e.Mode = ModeChange{From: ModeDraining}
			}
			if k == EventUpdated {
				e.prevGroup = "old"
			}
		}
		evs = append(evs, e)
	}
	h := newHistory(len(evs)-1, 0)
	var evicted []keptEvent
	for i := range evs {
		evs[i].Revision = uint64(i + 1)
		if ev, ok := h.push(&evs[i]); ok {
			evicted = append(evicted, ev)
		}
	}
	if len(evicted) != 1 || evicted[0].rev != 1 || evicted[0].about != aboutOf(&evs[0]) {
		t.Errorf("evicted %+v, want the first event %+v", evicted, evs[0])
	}
	for i := range h.n {
		var got Event
		h.at(i).fill(&got)
		if want := evs[i+1]; !reflect.DeepEqual(got, want) {
			t.Errorf("%v: kept as %+v, published %+v", want.Kind, got, want)
		}
		if a := aboutOf(&evs[i+1]); h.at(i).about != a {
			t.Errorf("%v: filters read %+v, want %+v", evs[i+1].Kind, h.at(i).about, a)
		}
		if h.rev(i) != evs[i+1].Revision {
			t.Errorf("event %d: revision %d, want %d", i, h.rev(i), evs[i+1].Revision)
		}
	}
	if kept, whole := unsafe.Sizeof(keptEvent{}), unsafe.Sizeof(Event{}); kept*8 > whole {
		t.Errorf("a kept event is %d bytes, an Event %d: more than an eighth", kept, whole)
	}
}
