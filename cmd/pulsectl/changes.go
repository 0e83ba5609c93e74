package main

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
)

// What changed between two specs of a target, for set, for add when it
// replaces a spec, and for watch's updates.

// specChanges describes how a spec changed, field by field: "interval 2s
// -> 5s", "group set to edge", "group cleared (was edge)", "passive
// outcomes off -> on", "probe tcp a:80 -> http GET http://b/".
func specChanges(old, cur *pb.Target) []string {
	var out []string
	if probeSummary(old) != probeSummary(cur) {
		out = append(out, fmt.Sprintf("probe %s -> %s", probeSummary(old), probeSummary(cur)))
	} else if c := probeFieldChanges(old, cur); c != "" {
		out = append(out, c)
	}
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

// probeFieldChanges names the fields that differ between two probes of
// one kind whose summaries are the same: "http.headers changed". Their
// values are not shown: a header or a payload may hold a secret.
func probeFieldChanges(old, cur *pb.Target) string {
	o, c := old.ProtoReflect(), cur.ProtoReflect()
	probe := c.Descriptor().Oneofs().ByName("probe")
	fd := c.WhichOneof(probe)
	if fd == nil || o.WhichOneof(probe) != fd {
		return ""
	}
	was, is := o.Get(fd).Message(), c.Get(fd).Message()
	var paths []string
	fields := fd.Message().Fields()
	for i := range fields.Len() {
		sub := fields.Get(i)
		if was.Has(sub) != is.Has(sub) || !was.Get(sub).Equal(is.Get(sub)) {
			paths = append(paths, string(fd.Name())+"."+string(sub.Name()))
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
