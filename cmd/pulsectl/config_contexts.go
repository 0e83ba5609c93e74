package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
)

// getContexts lists the config file's contexts, kubectl-style, "*"
// marking the one in force (--context, else PULSE_CONTEXT, else the file's
// current-context).
func getContexts(e *env, cf *clientFlags) int {
	path, named := cf.configFile()
	file, err := loadConfig(path, named)
	if err != nil {
		e.errorf("%v", err)
		return exitUsage
	}
	if file == nil {
		e.errorf("%s", noConfigFile(path))
		return exitUsage
	}
	if len(file.Contexts) == 0 {
		e.errorf("no contexts: %s has none (pulsectl config --help shows the file's form)", orDash(path))
		return exitUsage
	}
	current := cf.contextName()
	if current == "" {
		current = file.CurrentContext
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CURRENT\tNAME\tADDR")
	for _, name := range slices.Sorted(maps.Keys(file.Contexts)) {
		mark := ""
		if name == current {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, escape(name), orDash(escape(file.Contexts[name].Addr)))
	}
	tw.Flush()
	return exitOK
}

// useContext makes name the config file's current-context. It rewrites
// that one key and keeps the rest of the file, comments included; an
// unknown context, or a file that does not load, changes nothing.
func useContext(e *env, cf *clientFlags, name string) int {
	path, _ := cf.configFile()
	if path == "" {
		e.errorf("no config file: name one with --config or PULSE_CONFIG")
		return exitUsage
	}
	file, err := loadConfig(path, true)
	if errors.Is(err, fs.ErrNotExist) {
		e.errorf("%s", noConfigFile(path))
		return exitUsage
	}
	if err != nil {
		e.errorf("%v", err)
		return exitUsage
	}
	if _, ok := file.Contexts[name]; !ok {
		names := slices.Sorted(maps.Keys(file.Contexts))
		if len(names) == 0 {
			e.errorf("config %s: no context %q (the file has no contexts)", path, name)
		} else {
			e.errorf("config %s: no context %q (it has %s)%s", path, name, orList(names), didYouMean(suggest.Closest(name, names, nil)))
		}
		return exitUsage
	}
	if err := setCurrentContext(path, name); err != nil {
		e.errorf("config %s: %v", path, err)
		return exitServer
	}
	fmt.Fprintf(e.stdout, "switched to context %q (%s)\n", name, path)
	if env := os.Getenv(envContext); env != "" && env != name && !isSet(cf.fs, "context") {
		fmt.Fprintf(e.stderr, "note: %s=%s still overrides the file's current-context here\n", envContext, env)
	}
	return exitOK
}

// noConfigFile says that the config file at path, which a command that
// reads contexts needs, does not exist: not that it has no contexts.
func noConfigFile(path string) string {
	return fmt.Sprintf("no config file: %s does not exist; write one with your contexts (pulsectl config --help shows its form)", orDash(path))
}

// setCurrentContext rewrites the file at path with current-context set to
// name, replacing the file atomically and keeping its permissions.
func setCurrentContext(path, name string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return errors.New("the file is not a mapping of current-context and contexts")
	}
	root := doc.Content[0]
	value := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}
	found := false
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "current-context" {
			value.HeadComment, value.LineComment = root.Content[i+1].HeadComment, root.Content[i+1].LineComment
			root.Content[i+1] = value
			found = true
		}
	}
	if !found {
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "current-context"}
		root.Content = append([]*yaml.Node{key, value}, root.Content...)
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	mode := os.FileMode(0o600)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pulsectl-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a failure; gone once renamed
	if _, err := tmp.Write(out.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
