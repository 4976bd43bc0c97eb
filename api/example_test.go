package api_test

import (
	"encoding/json"
	"fmt"

	"github.com/coalesce-io/coalesce/api"
)

// The document as JSON, as GET /v1/openapi.json serves it.
func ExampleJSON() {
	b, err := api.JSON()
	if err != nil {
		panic(err)
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		panic(err)
	}
	_, ok := doc.Paths["/v1/events"]
	fmt.Println(doc.OpenAPI, ok)
	// Output: 3.1.0 true
}
