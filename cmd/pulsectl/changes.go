package main

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// What changed between two specs of a target, for set, for add when it
// replaces a spec, and for watch's updates.

// specChanges describes how a spec changed, field by field: "interval 2s
// -> 5s", "group set to edge", "group cleared (was edge)", "passive
// outcomes off -> on", "probe tcp a:80 -> http GET http://b/", "header
// X-Env added". A value pulsed does not show (see hiddenSent) that changed
// is not among them: both specs show it as <redacted>.
func specChanges(old, cur *pb.Target) []string {
	out := probeChanges(old, cur)
	o, c := old.ProtoReflect(), cur.ProtoReflect()
	fields := o.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "name" || fd.ContainingOneof() != nil && !fd.HasOptionalKeyword() {
			continue
		}
		was, is := fieldText(o, fd), fieldText(c, fd)
		name := strings.ReplaceAll(string(fd.Name()), "_", " ")
		switch {
		case was == is:
		case fd.Kind() == protoreflect.BoolKind || was != "" && is != "":
			out = append(out, fmt.Sprintf("%s %s -> %s", name, was, is))
		case was == "":
			out = append(out, fmt.Sprintf("%s set to %s", name, is))
		default:
			out = append(out, fmt.Sprintf("%s cleared (was %s)", name, was))
		}
	}
	return out
}

// probeChanges describes how a target's probe changed. A probe of another
// kind is "probe tcp a:80 -> http GET http://b/". For one of the same kind,
// the summaries are compared without their headers, which would repeat
// the whole probe for one header: "probe A -> B" when they differ, then
// each header or gRPC metadata key added or removed ("header X-Env
// added"), and, when the summaries are the same, the probe's other fields
// that differ ("http.tls changed").
func probeChanges(old, cur *pb.Target) []string {
	if probeKind(old) != probeKind(cur) {
		return []string{fmt.Sprintf("probe %s -> %s", probeSummary(old), probeSummary(cur))}
	}
	var out []string
	was, is := probeCore(old), probeCore(cur)
	if was != is {
		out = append(out, fmt.Sprintf("probe %s -> %s", was, is))
	}
	var told []string // the probe's fields whose keys were named
	for _, m := range []struct {
		word, field string
		old, cur    map[string]string
	}{
		{"header", "http.headers", old.GetHttp().GetHeaders(), cur.GetHttp().GetHeaders()},
		{"metadata", "grpc.metadata", old.GetGrpc().GetMetadata(), cur.GetGrpc().GetMetadata()},
	} {
		if keys := keyChanges(m.word, m.old, m.cur); len(keys) > 0 {
			out = append(out, keys...)
			told = append(told, m.field)
		}
	}
	if was == is {
		if c := probeFieldChanges(old, cur, told); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// keyChanges names the keys of a header or metadata map that were added
// or removed, in key order: "header X-Env added", "header X-Old removed".
// word names the map's kind.
func keyChanges(word string, old, cur map[string]string) []string {
	all := maps.Clone(old)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, cur)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(all)) {
		_, was := old[k]
		_, is := cur[k]
		switch {
		case is && !was:
			out = append(out, fmt.Sprintf("%s %s added", word, k))
		case was && !is:
			out = append(out, fmt.Sprintf("%s %s removed", word, k))
		}
	}
	return out
}

// probeKind is the field of t's probe (http, tcp, grpc, dns), nil for
// none.
func probeKind(t *pb.Target) protoreflect.FieldDescriptor {
	m := t.ProtoReflect()
	return m.WhichOneof(m.Descriptor().Oneofs().ByName("probe"))
}

// probeFieldChanges names the fields that differ between two probes of
// one kind, but those in skip: "http.tls changed". Their values are not
// shown: a header or a payload may hold a secret.
func probeFieldChanges(old, cur *pb.Target, skip []string) string {
	fd := probeKind(cur)
	if fd == nil || probeKind(old) != fd {
		return ""
	}
	was, is := old.ProtoReflect().Get(fd).Message(), cur.ProtoReflect().Get(fd).Message()
	var paths []string
	fields := fd.Message().Fields()
	for i := range fields.Len() {
		sub := fields.Get(i)
		path := string(fd.Name()) + "." + string(sub.Name())
		if (was.Has(sub) != is.Has(sub) || !was.Get(sub).Equal(is.Get(sub))) && !slices.Contains(skip, path) {
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return ""
	}
	return strings.Join(paths, ", ") + " changed"
}

// fieldText is a field's value for a person: "" for an unset or empty
// one, a bool as "on" or "off", a duration as "1.5s", an enum value by its
// short name.
func fieldText(m protoreflect.Message, fd protoreflect.FieldDescriptor) string {
	if fd.Kind() == protoreflect.BoolKind && !fd.IsList() {
		if m.Get(fd).Bool() {
			return "on"
		}
		return "off"
	}
	if !m.Has(fd) {
		return ""
	}
	v := m.Get(fd)
	switch {
	case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Duration":
		d := v.Message().Interface().(*durationpb.Duration)
		return d.AsDuration().String()
	case fd.Enum() != nil:
		ev := fd.Enum().Values().ByNumber(v.Enum())
		if ev == nil {
			return fmt.Sprint(v.Enum())
		}
		name := strings.ToLower(string(ev.Name()))
		for _, prefix := range []string{"state_", "model_"} {
			name = strings.TrimPrefix(name, prefix)
		}
		return name
	case fd.IsList() || fd.IsMap() || fd.Message() != nil:
		return fmt.Sprint(v.Interface())
	}
	return fmt.Sprint(v.Interface())
}

// hiddenSent names the fields of t whose values pulsed answers as
// <redacted> (header values, a URL's password, gRPC metadata values, TLS
// private keys), when t has them: "http.headers", "the password of
// http.url", "grpc.metadata", "http.tls.key_pem". A spec read back shows
// them the same whatever they were, so whether a request that sent them
// changed them cannot be seen.
func hiddenSent(t *pb.Target) []string {
	var out []string
	if len(t.GetHttp().GetHeaders()) > 0 {
		out = append(out, "http.headers")
	}
	if u, err := url.Parse(t.GetHttp().GetUrl()); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			out = append(out, "the password of http.url")
		}
	}
	if len(t.GetGrpc().GetMetadata()) > 0 {
		out = append(out, "grpc.metadata")
	}
	for _, o := range []struct {
		field string
		tls   *pb.TlsOptions
	}{{"http.tls", t.GetHttp().GetTls()}, {"tcp.tls", t.GetTcp().GetTls()}, {"grpc.tls_options", t.GetGrpc().GetTlsOptions()}} {
		if o.tls.GetKeyPem() != "" {
			out = append(out, o.field+".key_pem")
		}
	}
	return out
}

// noChangeShown is what set and add say of a target whose spec shows no
// change after a request that sent values pulsed does not show (sent, from
// hiddenSent): not "unchanged", since those may have changed.
func noChangeShown(name string, sent []string) string {
	return fmt.Sprintf("%s: no change shown; sent %s, whose values pulsed does not show", name, andList(sent))
}

// alsoSent is what set and add append to the changes they show when the
// request also sent values pulsed does not show, and "" when it did not.
func alsoSent(sent []string) string {
	if len(sent) == 0 {
		return ""
	}
	return fmt.Sprintf("; also sent %s, whose values pulsed does not show", andList(sent))
}
