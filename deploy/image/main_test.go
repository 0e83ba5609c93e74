package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image holds the three binaries, the CA certificates and the
// non-root user, runs pulsed as 65532 with the store's volume /data and
// TLS and tokens by default, and carries the version as tag and label.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	for _, b := range Binaries {
		if err := os.WriteFile(filepath.Join(dir, b), []byte("binary "+b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("CERTS"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := run([]string{"-bin", dir, "-ca", ca, "-version", "v1.2.3", "-revision", "abc", "-out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"v1.2.3", "latest"} {
		ref, err := name.NewTag(Repository + ":" + tag)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(out, &ref)
		if err != nil {
			t.Fatalf("tag %s: %v", tag, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/pulsed"}) || !slices.Equal(c.Cmd, DefaultArgs) {
			t.Errorf("config: user %q entrypoint %q cmd %q", c.User, c.Entrypoint, c.Cmd)
		}
		if _, ok := c.Volumes["/data"]; !ok || c.Labels["org.opencontainers.image.version"] != "v1.2.3" || c.Labels["org.opencontainers.image.revision"] != "abc" {
			t.Errorf("config: volumes %v labels %v", c.Volumes, c.Labels)
		}
		files := map[string]*tar.Header{}
		contents := map[string]string{}
		tr := tar.NewReader(mutate.Extract(img))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
			b, _ := io.ReadAll(tr)
			contents[h.Name] = string(b)
		}
		for _, b := range Binaries {
			if h := files[b]; h == nil || h.Mode != 0o755 || contents[b] != "binary "+b {
				t.Errorf("/%s: %+v %q", b, h, contents[b])
			}
		}
		if contents["etc/ssl/certs/ca-certificates.crt"] != "CERTS" {
			t.Errorf("CA certificates: %q", contents["etc/ssl/certs/ca-certificates.crt"])
		}
		if !strings.Contains(contents["etc/passwd"], "nonroot:x:65532:65532:") {
			t.Errorf("/etc/passwd: %q", contents["etc/passwd"])
		}
		if h := files["data"]; h == nil || h.Uid != UID || h.Mode&0o7777 != 0o700 {
			t.Errorf("/data: %+v", h)
		}
	}
}

// Missing inputs are errors that name the flag.
func TestImageBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-version", "v1", "-out", "x"}, "-bin"},
		{[]string{"-bin", dir, "-out", "x"}, "-version"},
		{[]string{"-bin", dir, "-version", "v1"}, "-out"},
		{[]string{"-bin", dir, "-version", "bad tag!", "-out", "x"}, "-version"},
		{[]string{"-bin", dir, "-version", "v1", "-name", "Bad Name", "-out", "x"}, "-name"},
		{[]string{"-bin", dir, "-version", "v1", "-created", "yesterday", "-out", "x"}, "-created"},
		{[]string{"-bin", dir, "-version", "v1", "-ca", filepath.Join(dir, "none"), "-out", "x"}, "-ca"},
		{[]string{"-bin", dir, "-version", "v1", "-ca", "/dev/null", "-out", "x"}, "-bin"},
	} {
		err := run(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
