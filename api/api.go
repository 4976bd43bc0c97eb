// Package api holds the OpenAPI 3.1 document of coalesce serve's HTTP API
// (openapi.yaml beside this file), which the daemon serves at
// /v1/openapi.json and its tests check the handlers against.
package api

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

//go:embed openapi.yaml
var document []byte

// YAML returns the document as written.
func YAML() []byte { return append([]byte(nil), document...) }

// JSON returns the document as JSON (members sorted by name).
func JSON() ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(document, &v); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("api: openapi.yaml as JSON: %w", err)
	}
	return b, nil
}
