// Package version says which build of Pulse a binary is, from what the Go
// toolchain stamped into it: the module's version and, for a binary built
// from a Git checkout (go build, go install), the commit it was built from.
// Every Pulse binary prints it with --version; pulsed also exports it as
// the metric pulse_build_info.
//
// The Go toolchain stamps no revision into a binary built from a linked Git
// worktree, or with -buildvcs=false; `make build` then passes it with
//
//	-ldflags "-X github.com/pulsehealth/pulse/internal/version.revision=$(git rev-parse HEAD)"
package version

import (
	"flag"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is a build's version. Its zero value is an unknown build.
type Info struct {
	// Version is the main module's version: a release tag such as
	// "v1.2.0", a pseudo-version, or "(devel)" for a build from a checkout.
	Version string
	// Revision is the commit the binary was built from, and Time that
	// commit's time (RFC 3339); both empty when the toolchain stamped none
	// (go run, go test, or -buildvcs=false).
	Revision string
	Time     string
	// Modified is true when the checkout had uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// revision is the commit given with -ldflags -X, for a build the toolchain
// stamped no revision into; the toolchain's stamp wins over it.
var revision string

// Get returns the running binary's Info. It is safe for concurrent use.
func Get() Info {
	i := stamped()
	if i.Revision == "" {
		i.Revision = revision
	}
	return i
}

// stamped returns what the toolchain stamped into the binary.
func stamped() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", GoVersion: runtime.Version()}
	}
	i := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if i.Version == "" {
		i.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			i.Time = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// String describes i in one line, e.g. "v1.2.0 (revision 3f2a9c1e5b7d,
// 2026-12-01T17:00:00Z; go1.25.0 linux/amd64)", with ", modified" after a
// revision built with uncommitted changes.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString(i.Version)
	b.WriteString(" (")
	if i.Revision != "" {
		b.WriteString("revision " + i.Revision)
		if i.Time != "" {
			b.WriteString(", " + i.Time)
		}
		if i.Modified {
			b.WriteString(", modified")
		}
	} else {
		b.WriteString("no VCS revision stamped")
	}
	b.WriteString("; " + i.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH + ")")
	return b.String()
}

// Line is what --version prints: the binary's name, then Get().String().
func Line(binary string) string { return binary + " " + Get().String() }

// Flag registers -version (also --version) on fs; after fs.Parse, a true
// value means: print Line and exit 0.
func Flag(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "print the version (the module's version and the VCS revision built from) and exit")
}
