// Command gen writes api/openapi.json from the API's route table and
// types: run it with `go generate ./api`.
package main

import (
	"log"
	"os"

	"github.com/trisparc/gaas/api"
)

func main() {
	doc, err := api.OpenAPI()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("openapi.json", doc, 0o644); err != nil {
		log.Fatal(err)
	}
}
