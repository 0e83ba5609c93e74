// Command image builds Pulse's container image without a container
// daemon or a base image: one layer holding pulsed, pulsectl and pulse-lb
// (static binaries, built beforehand with CGO_ENABLED=0), the CA
// certificates, an /etc/passwd with the non-root user 65532 and the
// store's volume /data, written as a docker-archive tarball that
// `podman load` and `docker load` read.
//
// Usage (make image runs it):
//
//	go run ./deploy/image -bin DIR -version V [-revision R] [-created RFC3339] [-ca FILE] -out FILE
//
// The image runs pulsed as user 65532 with the store in /data, serving
// gRPC on 0.0.0.0:50051 and HTTP on 0.0.0.0:9090 with TLS and tokens read
// from /etc/pulse (mount them there); other arguments replace the default
// ones. pulsectl and pulse-lb are at /pulsectl and /pulse-lb.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Repository is the image's name unless -name says another; make image
// tags it with the version and with latest.
const Repository = "localhost/pulse"

// UID is the user (and group) the image runs as: not root, and the same
// number distroless images use for theirs.
const UID = 65532

// Binaries are the commands the image holds, at its root.
var Binaries = []string{"pulsed", "pulsectl", "pulse-lb"}

// DefaultArgs are pulsed's arguments unless the container is given others:
// the store in the volume, both listeners on every address with TLS and
// tokens (pulsed refuses a non-loopback listener without them), files
// mounted under /etc/pulse.
var DefaultArgs = []string{
	"-data-dir", "/data",
	"-listen", "0.0.0.0:50051",
	"-http-listen", "0.0.0.0:9090",
	"-tls-cert", "/etc/pulse/tls.crt",
	"-tls-key", "/etc/pulse/tls.key",
	"-token-file", "/etc/pulse/tokens",
	"-log-format", "json",
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "image:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	bin := fs.String("bin", "", "`directory` holding the static pulsed, pulsectl and pulse-lb")
	version := fs.String("version", "", "the image's version: its tag and its org.opencontainers.image.version label")
	revision := fs.String("revision", "", "the Git revision, for the org.opencontainers.image.revision label")
	created := fs.String("created", "", "the image's creation time, RFC 3339 (e.g. the commit's time, for a reproducible image); default: the Unix epoch")
	ca := fs.String("ca", "/etc/ssl/certs/ca-certificates.crt", "PEM `file` of the CA certificates pulsed trusts for its probes and etcd")
	out := fs.String("out", "", "`file` to write the docker-archive tarball to")
	repo := fs.String("name", Repository, "the image's `repository`: it is tagged repository:VERSION and repository:latest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case *bin == "":
		return errors.New("-bin is required")
	case *version == "":
		return errors.New("-version is required")
	case *out == "":
		return errors.New("-out is required")
	}
	when := time.Unix(0, 0).UTC()
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return fmt.Errorf("-created must be an RFC 3339 time: %w", err)
		}
		when = t.UTC()
	}
	if _, err := name.NewRepository(*repo); err != nil {
		return fmt.Errorf("-name %q is not a valid repository: %w", *repo, err)
	}
	tag, err := name.NewTag(*repo + ":" + *version)
	if err != nil {
		return fmt.Errorf("-version %q is not a valid tag: %w", *version, err)
	}
	latest, err := name.NewTag(*repo + ":latest")
	if err != nil {
		return err
	}

	layer, err := rootLayer(*bin, *ca, when)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture = runtime.GOARCH // go run builds this tool for the same GOARCH as the binaries
	if arch := os.Getenv("GOARCH"); arch != "" {
		cf.Architecture = arch
	}
	cf.OS = "linux"
	cf.Created = v1.Time{Time: when}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint:   []string{"/pulsed"},
		Cmd:          DefaultArgs,
		WorkingDir:   "/data",
		Volumes:      map[string]struct{}{"/data": {}},
		ExposedPorts: map[string]struct{}{"50051/tcp": {}, "9090/tcp": {}},
		StopSignal:   "SIGTERM",
		Env:          []string{"PATH=/"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "pulse",
			"org.opencontainers.image.description": "Pulse: pulsed, the gRPC health checker, with pulsectl and pulse-lb",
			"org.opencontainers.image.version":     *version,
			"org.opencontainers.image.revision":    *revision,
			"org.opencontainers.image.source":      "https://github.com/pulsehealth/pulse",
			"org.opencontainers.image.licenses":    "Apache-2.0",
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return err
	}
	if err := tarball.MultiRefWriteToFile(*out, map[name.Reference]v1.Image{tag: img, latest: img}); err != nil {
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	size, err := layer.Size()
	if err != nil {
		return err
	}
	usize, err := uncompressedSize(layer)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s and %s, one layer of %.1f MiB compressed, %.1f MiB unpacked\n",
		*out, tag, latest, float64(size)/(1<<20), float64(usize)/(1<<20))
	return nil
}

// rootLayer returns the image's only layer: its whole root file system.
func rootLayer(bin, ca string, when time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: when})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: when}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	certs, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("-ca: %w", err)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/data:/sbin/nologin\n", UID, UID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("etc/pulse", 0o755, 0) },
		func() error { return dir("etc/ssl", 0o755, 0) },
		func() error { return dir("etc/ssl/certs", 0o755, 0) },
		func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, certs) },
		func() error { return dir("data", 0o700, UID) },
		func() error { return dir("tmp", 0o1777, 0) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	for _, b := range Binaries {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			return nil, fmt.Errorf("-bin: %w", err)
		}
		if err := file(b, 0o755, data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// uncompressedSize returns the size of l's tar stream.
func uncompressedSize(l v1.Layer) (int64, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}
