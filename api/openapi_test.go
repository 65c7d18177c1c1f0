package api

import (
	"bytes"
	"testing"
)

// TestOpenAPIIsCurrent fails when openapi.json no longer matches the
// route table and types.
func TestOpenAPIIsCurrent(t *testing.T) {
	doc, err := OpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, openAPIDoc) {
		t.Fatal("api/openapi.json is out of date: run go generate ./api")
	}
}
