package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

const versionSynopsis = `version

Prints the module version, the VCS revision it was built from (and whether
the tree had local changes), the Go version, and the nats-server version
embedded for the development servers. Also: coalesce --version.`

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("version", versionSynopsis, stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprint(stdout, versionText())
	return nil
}

// versionText describes the build, from the binary's build information.
func versionText() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "coalesce (no build information)\n"
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (with local changes)"
			}
		}
	}
	nats := "not embedded"
	for _, d := range bi.Deps {
		if d.Path == "github.com/nats-io/nats-server/v2" {
			nats = d.Version
			if d.Replace != nil {
				nats = d.Replace.Version
			}
		}
	}
	out := fmt.Sprintf("coalesce %s\n", version)
	if rev != "" {
		out += fmt.Sprintf("revision %s%s %s\n", rev, modified, at)
	}
	return out + fmt.Sprintf("go       %s\nnats-server (embedded) %s\n", bi.GoVersion, nats)
}
