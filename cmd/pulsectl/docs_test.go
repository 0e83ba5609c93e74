package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCommandsReference: the pulsectl reference has a section headed
// "## pulsectl NAME" for every command pulsectl --help lists, each with an
// example of the command and its exit codes, and a section for nothing
// else named so.
func TestCommandsReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "pulsectl.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	sections := map[string]string{}
	headings := regexp.MustCompile(`(?m)^## pulsectl (\S+)$`).FindAllStringSubmatchIndex(page, -1)
	for i, h := range headings {
		end := len(page)
		if i+1 < len(headings) {
			end = headings[i+1][0]
		}
		if next := strings.Index(page[h[1]:end], "\n## "); next >= 0 {
			end = h[1] + next
		}
		name := page[h[2]:h[3]]
		if _, dup := sections[name]; dup {
			t.Errorf("two sections for pulsectl %s", name)
		}
		sections[name] = page[h[1]:end]
	}
	help := mustRun(t, "--help")
	for _, c := range commands() {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.name) + ` `).MatchString(help) {
			t.Errorf("pulsectl --help does not list %s", c.name)
		}
		s, ok := sections[c.name]
		if !ok {
			t.Errorf("docs/reference/pulsectl.md has no section headed \"## pulsectl %s\"", c.name)
			continue
		}
		if !strings.Contains(s, "\nExit codes:") {
			t.Errorf("the section of pulsectl %s does not give its exit codes", c.name)
		}
		if !regexp.MustCompile(`(?m)^pulsectl ` + regexp.QuoteMeta(c.name) + `( |$)`).MatchString(s) {
			t.Errorf("the section of pulsectl %s has no example of it", c.name)
		}
		delete(sections, c.name)
	}
	for name := range sections {
		t.Errorf("docs/reference/pulsectl.md has a section for pulsectl %s, which is no command", name)
	}
}
