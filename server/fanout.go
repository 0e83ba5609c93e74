package server

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/pulsehealth/pulse/checker"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// An event's message is the same on every stream that receives it: a
// watcher's filter decides whether it gets the event, never what it says.
// So the WatchTransitions streams share one encoded message per event
// (grpc.PreparedMsg) instead of each converting and marshalling its own:
// the first stream to send an event encodes it, the others send the same
// bytes. An event is its revision, kind, target and group: with replicas
// one revision of the shared registry can carry several events (a
// transition and the FLAPPING_STARTED it causes). Snapshots and progress marks differ per stream and are sent as
// before.
//
// The encoding depends on the stream's codec (its content subtype) and
// compressor (the one the client's request used), so those are part of the
// key. A stream whose transport does not tell them sends unshared.

// maxEncoded bounds the events kept encoded; past it the cache starts
// over. Streams deliver an event within moments of its publication, so a
// few thousand covers any burst; a stream far behind encodes its own.
const maxEncoded = 4096

type encodedKey struct {
	rev      uint64
	kind     checker.EventKind
	target   string
	group    string
	subtype  string // the stream's content subtype: its codec
	compress string // the stream's compressor; "" for none
	read     bool   // the read role's view (see readView)
}

// encoded is one event's message, encoded once.
type encoded struct {
	key  encodedKey
	once sync.Once
	msg  *grpc.PreparedMsg
	err  error
}

// encodedCache holds the events' encoded messages. It is safe for
// concurrent use.
//
// The event most recently looked up is also kept outside the lock: one
// event sent to 1,000 streams is 1,000 lookups of the same key, and they
// no longer queue on the lock for it.
type encodedCache struct {
	last atomic.Pointer[encoded] // the entry most recently looked up

	mu sync.Mutex // protects m
	m  map[encodedKey]*encoded
}

func (c *encodedCache) get(k encodedKey) *encoded {
	if e := c.last.Load(); e != nil && e.key == k {
		return e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil {
		if c.m == nil || len(c.m) >= maxEncoded {
			c.m = make(map[encodedKey]*encoded)
		}
		e = &encoded{key: k}
		c.m[k] = e
	}
	c.last.Store(e)
	return e
}

// streamEncoding says how a stream encodes its messages. ok is false when
// its transport does not tell.
func streamEncoding(stream grpc.ServerStream) (subtype, compress string, ok bool) {
	ts, ok := grpc.ServerTransportStreamFromContext(stream.Context()).(interface {
		ContentSubtype() string
		RecvCompress() string
	})
	if !ok {
		return "", "", false
	}
	return ts.ContentSubtype(), ts.RecvCompress(), true
}

// eventSender sends events on one WatchTransitions stream, sharing their
// encoded messages with the other streams of the same encoding.
type eventSender struct {
	stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse]
	cache  *encodedCache // nil: send unshared
	key    encodedKey    // rev, kind, target and group set per event
	read   bool          // the stream's caller has the read role only
}

func newEventSender(s *Server, stream grpc.ServerStreamingServer[pb.WatchTransitionsResponse], read bool) *eventSender {
	es := &eventSender{stream: stream, read: read}
	if subtype, compress, ok := streamEncoding(stream); ok {
		es.cache = &s.encoded
		es.key = encodedKey{subtype: subtype, compress: compress, read: read}
	}
	return es
}

// message returns e's message, in the read role's view for a read-only
// stream.
func (es *eventSender) message(e checker.Event) *pb.WatchTransitionsResponse {
	if es.read {
		return readEvent(eventToProto(e))
	}
	return eventToProto(e)
}

func (es *eventSender) send(e checker.Event) error {
	if es.cache == nil {
		return es.stream.Send(es.message(e))
	}
	es.key.rev, es.key.kind, es.key.target, es.key.group = e.Revision, e.Kind, e.Target(), e.Group()
	enc := es.cache.get(es.key)
	enc.once.Do(func() {
		msg := &grpc.PreparedMsg{}
		if err := msg.Encode(es.stream, es.message(e)); err != nil {
			enc.err = err
			return
		}
		enc.msg = msg
	})
	if enc.err != nil { // this stream cannot prepare messages: send its own
		return es.stream.Send(es.message(e))
	}
	return es.stream.SendMsg(enc.msg)
}
