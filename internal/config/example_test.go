package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/coalesce-io/coalesce/internal/config"
)

func ExampleLoad() {
	dir, err := os.MkdirTemp("", "coalesce-config")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "coalesce.yaml")
	yaml := `
policies:
  recompute_financials:
    mode: debounce
    window: 30s
    key_fields: [tenant_id]
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		panic(err)
	}

	cfg, err := config.Load(file, func(string) string { return "" })
	if err != nil {
		panic(err)
	}
	p := cfg.Policies[0]
	fmt.Printf("%s: %s after %v, payload %s, key %v; a job waits up to %v for a worker\n", p.Type, p.Mode, p.Window, p.Payload, p.KeyFields, cfg.NATS.MaxAge)
	fmt.Println("embedded servers:", cfg.UsesEmbedded())
	// Output:
	// recompute_financials: debounce after 30s, payload first, key [tenant_id]; a job waits up to 168h0m0s for a worker
	// embedded servers: true
}

func ExampleLoad_error() {
	dir, err := os.MkdirTemp("", "coalesce-config")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "coalesce.yaml")
	yaml := `
policies:
  recompute_financials:
    mode: debounce
    window: 3x
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		panic(err)
	}

	_, err = config.Load(file, func(string) string { return "" })
	var ce *config.Error
	if errors.As(err, &ce) {
		fmt.Printf("line %d: %s: %s\n", ce.Line, ce.Path, ce.Msg)
	}
	fmt.Println(errors.Is(err, config.ErrInvalid))
	// Output:
	// line 5: policies.recompute_financials.window: "3x" is not a duration (use e.g. 30s, 5m)
	// true
}
