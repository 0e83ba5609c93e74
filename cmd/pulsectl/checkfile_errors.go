package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A check file's decoding errors, said in the file's words: which target
// (by number, and name when it has one), which field, what it wants and
// what it got, never the Go types pulsectl decodes into.

// targetFields lists a target's fields, for an unknown field's message.
const targetFields = "name, kind, url, address, service, tls, headers, expected_status, timeout_s, timeout, critical, " +
	"method, body, expected_status_ranges, body_contains, body_not_contains, body_regex, body_limit, header_matches, " +
	"follow_redirects, tls_options, steps, authority, metadata, expected_statuses, dns"

// nestedObjects are a target's fields whose values are objects (or lists
// of objects), with the Go type each decodes into and its fields, for an
// unknown field's message.
var nestedObjects = []struct{ field, goType, fields string }{
	{"tls_options", "fileTLS", "ca_file, ca_pem, cert_file, key_file, cert_pem, key_pem, server_name, insecure_skip_verify, min_version, cert_expiry_warn, cert_expiry_fail"},
	{"steps", "fileStep", "send, send_hex, expect, expect_hex, expect_contains, expect_regex, read_limit"},
	{"header_matches", "fileHeaderMatch", "name, regex"},
	{"dns", "fileDNS", "name, type, server, rcode, answer_contains, answer_regex"},
}

// unknownNested says which of a JSON target's objects holds the unknown
// field name, or "" when none does: encoding/json does not say.
func unknownNested(raw json.RawMessage, name string) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return ""
	}
	if _, top := fields[name]; top {
		return ""
	}
	for _, n := range nestedObjects {
		var objs []map[string]json.RawMessage
		var one map[string]json.RawMessage
		if json.Unmarshal(fields[n.field], &one) == nil && one != nil {
			objs = append(objs, one)
		} else if json.Unmarshal(fields[n.field], &objs) != nil {
			continue
		}
		for i, o := range objs {
			if _, ok := o[name]; !ok {
				continue
			}
			where := n.field
			if one == nil {
				where = fmt.Sprintf("%s[%d]", n.field, i)
			}
			return fmt.Sprintf("%s: unknown field %q; its fields are %s", where, name, n.fields)
		}
	}
	return ""
}

// targetLabel is "target 2", or "target 2 (web)" when it has a name.
func targetLabel(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("target %d", i+1)
	}
	return fmt.Sprintf("target %d (%s)", i+1, name)
}

// jsonWords says what a JSON decoding error of one target, or of the top
// level when top is true, means.
func jsonWords(err error, top bool) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if top && field == "" {
			return fmt.Errorf("want a list of targets, or an object whose targets is that list; got %s", jsonValueWords(te.Value))
		}
		if field == "" {
			return fmt.Errorf("want an object with name and url (or kind and address), got %s", jsonValueWords(te.Value))
		}
		if top && field == "targets" {
			return fmt.Errorf("targets: want a list of targets, got %s", jsonValueWords(te.Value))
		}
		want := typeWords(te.Type)
		if field == "headers" && te.Type.Kind() == reflect.String {
			want = "a string as each header's value"
		}
		return fmt.Errorf("%s: want %s, got %s", field, want, jsonValueWords(te.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if top {
			return fmt.Errorf("unknown field %s at the top level: it takes only targets", name)
		}
		return fmt.Errorf("unknown field %s; a target's fields are %s", name, targetFields)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// jsonValueWords names a JSON value as UnmarshalTypeError.Value gives it.
func jsonValueWords(v string) string {
	switch {
	case v == "string":
		return "a string"
	case v == "number":
		return "a number"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case v == "bool":
		return "true or false"
	case v == "array":
		return "a list"
	case v == "object":
		return "an object"
	}
	return v
}

// typeWords names what a field of fileTarget takes.
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return typeWords(t.Elem())
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map:
		return "an object of names to strings"
	case reflect.Slice:
		return "a list"
	}
	return "an object"
}

// yamlNameOf returns the name a target's node gives, if any.
func yamlNameOf(item *yaml.Node) string {
	for i := 0; i+1 < len(item.Content); i += 2 {
		if item.Content[i].Value == "name" {
			return item.Content[i+1].Value
		}
	}
	return ""
}

var (
	yamlTypeErr    = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	yamlUnknownErr = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (.+)$`)
)

// yamlWords says what a YAML decoding error means, naming the target whose
// lines hold it: items are the targets' nodes, in order.
func yamlWords(err error, items []*yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		msgs = append(msgs, yamlOne(e, items))
	}
	return errors.New(strings.Join(msgs, "; "))
}

func yamlOne(e string, items []*yaml.Node) string {
	line := 0
	var what string
	if m := yamlUnknownErr.FindStringSubmatch(e); m != nil {
		line, _ = strconv.Atoi(m[1])
		what = fmt.Sprintf("unknown field %q; a target's fields are %s", m[2], targetFields)
		if !strings.HasSuffix(m[3], "fileTarget") {
			what = fmt.Sprintf("unknown field %q at the top level: it takes only targets", m[2])
		}
		for _, n := range nestedObjects {
			if strings.HasSuffix(m[3], "."+n.goType) {
				what = fmt.Sprintf("unknown field %q in %s; its fields are %s", m[2], n.field, n.fields)
			}
		}
	} else if m := yamlTypeErr.FindStringSubmatch(e); m != nil {
		line, _ = strconv.Atoi(m[1])
		got := yamlTagWords(m[2])
		if m[3] != "" {
			got = fmt.Sprintf("%s (%s)", got, m[3])
		}
		what = fmt.Sprintf("want %s, got %s", yamlTypeWords(m[4]), got)
	} else {
		return e
	}
	// The target whose lines hold the error, and the field on that line.
	idx := -1
	for i, it := range items {
		if it.Line <= line {
			idx = i
		}
	}
	if idx < 0 {
		return fmt.Sprintf("line %d: %s", line, what)
	}
	item := items[idx]
	for i := 0; i+1 < len(item.Content); i += 2 {
		if k, v := item.Content[i], item.Content[i+1]; v.Line == line && k.Kind == yaml.ScalarNode && !strings.HasPrefix(what, "unknown field") {
			what = k.Value + ": " + what
			break
		}
	}
	return fmt.Sprintf("%s, line %d: %s", targetLabel(idx, yamlNameOf(item)), line, what)
}

// yamlTagWords names a YAML node's tag.
func yamlTagWords(tag string) string {
	switch tag {
	case "str":
		return "a string"
	case "int":
		return "a whole number"
	case "float":
		return "a number"
	case "bool":
		return "true or false"
	case "seq":
		return "a list"
	case "map":
		return "a map"
	case "null":
		return "nothing"
	}
	return tag
}

// yamlTypeWords names the Go type yaml.v3 could not decode into.
func yamlTypeWords(goType string) string {
	switch {
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "a string"
	case goType == "int":
		return "a whole number"
	case goType == "float64":
		return "a number"
	case strings.HasPrefix(goType, "map["):
		return "a map of names to strings"
	case goType == "[]string":
		return "a list of strings"
	case strings.HasPrefix(goType, "[]") && strings.HasSuffix(goType, "fileTarget"):
		return "a list of targets"
	case strings.HasPrefix(goType, "[]"):
		return "a list of " + strings.TrimPrefix(yamlTypeWords(strings.TrimPrefix(goType, "[]")), "a ")
	case strings.HasSuffix(goType, "fileTarget"):
		return "a target: a map with name and url (or kind and address)"
	}
	for _, n := range nestedObjects {
		if strings.HasSuffix(goType, "."+n.goType) {
			return "a map of " + n.fields
		}
	}
	return "a map with targets"
}
