package api

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:generate go run ./gen

// openAPIDoc is openapi.json, generated from the route table and the
// types by `go generate ./api` and kept in the repository; a test fails
// when it is stale.
//
//go:embed openapi.json
var openAPIDoc []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDoc)
}

// OpenAPI builds the OpenAPI 3 document of the routes.
func OpenAPI() ([]byte, error) {
	schemas := map[string]any{}
	paths := map[string]map[string]any{}
	for _, r := range routes {
		op := map[string]any{"summary": r.summary, "operationId": operationID(r)}
		var params []any
		if strings.Contains(r.path, "{id}") {
			params = append(params, map[string]any{"name": "id", "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range r.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "description": q.doc, "schema": map[string]any{"type": q.typ}})
		}
		if len(params) > 0 {
			op["parameters"] = params
		}
		if r.body != nil {
			op["requestBody"] = map[string]any{"required": true, "content": content(r.body, schemas)}
		}
		responses := map[string]any{
			statusKey(r.status): map[string]any{"description": "OK", "content": content(r.result, schemas)},
			"default":           map[string]any{"description": "An error, with a sentence for people", "content": content(Error{}, schemas)},
		}
		op["responses"] = responses
		if r.public {
			op["security"] = []any{}
		}
		if paths[r.path] == nil {
			paths[r.path] = map[string]any{}
		}
		paths[r.path][strings.ToLower(r.method)] = op
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":       "GaaS node API",
			"version":     "1",
			"description": "The HTTP API of a GaaS node: what the app and the CLI use. Money is integer paise.",
		},
		"security": []any{map[string]any{"bearer": []any{}}},
		"paths":    paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas":         schemas,
		},
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return append(out, '\n'), err
}

func operationID(r route) string {
	parts := []string{strings.ToLower(r.method)}
	for _, p := range strings.Split(strings.TrimPrefix(r.path, "/api/"), "/") {
		if p != "{id}" {
			parts = append(parts, strings.NewReplacer(".", "_").Replace(p))
		}
	}
	return strings.Join(parts, "_")
}

func statusKey(code int) string { return strconv.Itoa(code) }

func content(v any, schemas map[string]any) map[string]any {
	if ct, ok := v.(string); ok {
		return map[string]any{ct: map[string]any{"schema": map[string]any{"type": "string", "format": "binary"}}}
	}
	return map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(v), schemas)}}
}

var timeType = reflect.TypeOf(time.Time{})

// schemaOf describes a Go type as its JSON encoding appears, adding named
// structs to schemas.
func schemaOf(t reflect.Type, schemas map[string]any) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.Pointer:
		s := schemaOf(t.Elem(), schemas)
		if _, ok := s["$ref"]; ok {
			return map[string]any{"allOf": []any{s}, "nullable": true}
		}
		s["nullable"] = true
		return s
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas)}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), schemas)}
	case t.Kind() == reflect.Interface:
		return map[string]any{}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return map[string]any{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return map[string]any{"type": "number"}
	case t.Kind() == reflect.Struct:
		name := t.Name()
		if _, done := schemas[name]; !done {
			schemas[name] = nil // reserve, for recursive types
			props := map[string]any{}
			var required []string
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				tag := f.Tag.Get("json")
				if !f.IsExported() || tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if name == "" {
					name = f.Name
				}
				props[name] = schemaOf(f.Type, schemas)
				if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
					required = append(required, name)
				}
			}
			sort.Strings(required)
			s := map[string]any{"type": "object", "properties": props}
			if len(required) > 0 {
				s["required"] = required
			}
			schemas[name] = s
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}
