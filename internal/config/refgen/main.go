// Command refgen writes the configuration reference (docs/config-reference.md)
// from the tagged structs of internal/config and debounce.Policy and their
// comments: go generate ./internal/config.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/coalesce-io/coalesce/internal/config"
)

func main() {
	out := flag.String("o", "", "the file to write (default: standard output)")
	flag.Parse()
	// go generate runs in internal/config: its own files and debounce's.
	docs, err := config.FieldDocs(".", "../../debounce")
	if err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
	ref := config.Reference(docs)
	if *out == "" {
		_, _ = os.Stdout.Write(ref)
		return
	}
	if err := os.WriteFile(*out, ref, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "refgen:", err)
		os.Exit(1)
	}
}
