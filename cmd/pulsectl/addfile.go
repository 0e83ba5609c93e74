package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/pulsehealth/pulse/cmd/internal/suggest"
	pb "github.com/pulsehealth/pulse/gen/pulse/v1"
	"github.com/pulsehealth/pulse/internal/yamlpb"
)

// addBatchTargets and addBatchBytes bound one AddTargets call: pulsed takes
// at most 10,000 targets a call, and 1 MiB a request by default.
const (
	addBatchTargets = 10000
	addBatchBytes   = 512 << 10
)

// addFile is add --file: it registers the file's targets with AddTargets,
// in batches, and reports what pulsed did with each.
func (a *addFlags) addFile(ctx context.Context, e *env, c *command) int {
	// The connection and output flags apply; the target's do not.
	conn := flag.NewFlagSet("", flag.ContinueOnError)
	addClientFlags(conn)
	addOutputFlag(conn, "", "")
	var other []string
	a.fs.Visit(func(f *flag.Flag) {
		if f.Name != "file" && conn.Lookup(f.Name) == nil {
			other = append(other, "--"+f.Name)
		}
	})
	if len(other) > 0 {
		return c.usageError(e, "--file takes every field from the file; drop %s", strings.Join(other, ", "))
	}
	data, err := os.ReadFile(a.file)
	if err != nil {
		return c.usageError(e, "--file: %v", err)
	}
	var file pb.TargetsFile
	if err := yamlpb.Unmarshal(a.file, data, &file); err != nil {
		return c.usageError(e, "%s", suggest.FileErrors(err))
	}
	cl, code, ok := a.client.dial(e)
	if !ok {
		return code
	}
	defer cl.Close()
	all := &pb.AddTargetsResponse{}
	batch := &pb.AddTargetsRequest{}
	size := 0
	send := func() bool {
		if len(batch.Targets) == 0 {
			return true
		}
		cctx, cancel := cl.writeCtx(ctx)
		defer cancel()
		resp, err := cl.AddTargets(cctx, batch)
		if err != nil {
			code = cl.fail(e, err, "")
			return false
		}
		all.Results = append(all.Results, resp.GetResults()...)
		all.Created += resp.GetCreated()
		all.Refused += resp.GetRefused()
		batch, size = &pb.AddTargetsRequest{}, 0
		return true
	}
	for _, t := range file.GetTargets() {
		n := proto.Size(t) + 4
		if len(batch.Targets) == addBatchTargets || (len(batch.Targets) > 0 && size+n > addBatchBytes) {
			if !send() {
				return code
			}
		}
		batch.Targets = append(batch.Targets, t)
		size += n
	}
	if !send() {
		return code
	}
	if a.output.structured() {
		if rc := e.printAs(a.output, all); rc != exitOK {
			return rc
		}
	} else {
		for _, r := range all.GetResults() {
			if r.GetCode() != "" {
				// The message's targets[i] counts in its call; the name says
				// which target it is.
				msg := r.GetError()
				if i := strings.Index(msg, "]."); strings.HasPrefix(msg, "targets[") && i > 0 {
					msg = msg[i+2:]
				}
				fmt.Fprintf(e.stdout, "refused %s: %s\n", escape(r.GetName()), msg)
			}
		}
		fmt.Fprintf(e.stdout, "%d targets: %d added, %d updated or unchanged, %d refused\n",
			len(all.GetResults()), all.GetCreated(), uint32(len(all.GetResults()))-all.GetCreated()-all.GetRefused(), all.GetRefused())
	}
	if all.GetRefused() > 0 {
		return exitUsage
	}
	return exitOK
}
