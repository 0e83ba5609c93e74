package boltstore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/probe"
)

// specTypes calls f with every exported struct field reachable from a
// checker.Spec, through pointers, slices and maps, and the path to it.
func specTypes(t reflect.Type, path string, seen map[reflect.Type]bool, f func(path string, sf reflect.StructField)) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		specTypes(t.Elem(), path, seen, f)
		return
	case reflect.Struct:
	default:
		return
	}
	if t == reflect.TypeFor[time.Time]() || seen[t] {
		return
	}
	seen[t] = true
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		f(path+"."+sf.Name, sf)
		specTypes(sf.Type, path+"."+sf.Name, seen, f)
	}
}

// TestEverySpecFieldOmitsItsZero: the store keeps a spec as JSON, and most
// of a spec's fields are zero in most specs; each field's tag leaves a
// zero value out, so that a record holds only what its target sets. A
// field added without the tag fails here.
func TestEverySpecFieldOmitsItsZero(t *testing.T) {
	n := 0
	specTypes(reflect.TypeFor[checker.Spec](), "Spec", map[reflect.Type]bool{}, func(path string, sf reflect.StructField) {
		n++
		if !strings.Contains(sf.Tag.Get("json"), "omitzero") {
			t.Errorf("%s: json tag %q, want omitzero", path, sf.Tag.Get("json"))
		}
	})
	if n < 50 {
		t.Errorf("walked %d fields, want every field of Spec and the probe specs", n)
	}
}

// fill sets every exported field reachable from v to a value that is not
// zero: a string names its field, a number is 1, a pointer, a slice and a
// map get one element each.
func fill(v reflect.Value, name string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), name)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), name)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, name+"-key")
		fill(e, name)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), v.Type().Field(i).Name)
			}
		}
	}
}

// TestEverySpecFieldSurvivesTheStore: a spec with every field set comes
// back from the store whole, so leaving zero values out of a record loses
// nothing that is set.
func TestEverySpecFieldSurvivesTheStore(t *testing.T) {
	var full checker.Spec
	fill(reflect.ValueOf(&full).Elem(), "x")
	full.Name = "full"
	dir := t.TempDir()
	s, err := Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutSpecs([]checker.Spec{full, {Name: "bare"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, time.Second); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, _, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]checker.StoredTarget{{Spec: checker.Spec{Name: "bare"}}, {Spec: full}}, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

// TestAPlainSpecRecordIsSmall: an HTTP target with the API's defaults is
// stored in about a quarter of what writing every field took (634 bytes).
func TestAPlainSpecRecordIsSmall(t *testing.T) {
	spec := checker.Spec{Name: "web-000123", Probe: probe.Spec{HTTP: &probe.HTTPSpec{URL: "http://127.0.0.1:40123/healthz"}},
		Interval: 10 * time.Second, Timeout: time.Second, Rise: 2, Fall: 3}
	v, err := json.Marshal(specRecord{V: specVersion(spec), Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"v":1,"spec":{"Name":"web-000123","Probe":{"HTTP":{"URL":"http://127.0.0.1:40123/healthz"}},"Interval":10000000000,"Timeout":1000000000,"Rise":2,"Fall":3}}`
	if string(v) != want {
		t.Errorf("record %d bytes:\n%s\nwant %d bytes:\n%s", len(v), v, len(want), want)
	}
}
