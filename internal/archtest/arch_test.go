package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Doc        string
	Deps       []string
	Name       string
}

func list(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Doc,Deps,Name", "github.com/trisparc/gaas/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestEveryPackageHasADocComment(t *testing.T) {
	for _, p := range list(t) {
		if p.Doc == "" {
			t.Errorf("%s has no package doc comment saying what it is for", p.ImportPath)
		}
	}
}

// TestImportDirection keeps the wire format, money, the ledger and the
// stores free of the node and everything above it.
func TestImportDirection(t *testing.T) {
	const mod = "github.com/trisparc/gaas/"
	low := map[string]bool{"protocol": true, "money": true, "ledger": true, "store": true, "inputs": true, "sandbox": true, "gpu": true, "blocks": true, "p2p": true}
	high := []string{"node", "api", "coordinator", "testnet", "cmd/gaas"}
	for _, p := range list(t) {
		name := strings.TrimPrefix(p.ImportPath, mod)
		if !low[name] {
			continue
		}
		for _, d := range p.Deps {
			for _, h := range high {
				if d == mod+h {
					t.Errorf("%s imports %s: the low layers must not depend on the high ones", name, h)
				}
			}
		}
	}
}
