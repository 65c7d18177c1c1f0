package inputs

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"time"
)

// Script describes a Python script.
type Script struct {
	MainFound   bool   `json:"main_found"`
	MainAsync   bool   `json:"main_async,omitempty"`
	MainLine    int    `json:"main_line,omitempty"`
	SyntaxError string `json:"syntax_error,omitempty"`
	SyntaxLine  int    `json:"syntax_line,omitempty"`
	Size        int64  `json:"size"`
}

// MaxScriptSize bounds a script; a training script is source, not data.
const MaxScriptSize = 1 << 20

//go:embed checkscript.py
var checkScriptPy string

// CheckScript parses src with Python's own parser (ast) and reports
// whether it defines a top-level main(). It does not run the script.
func CheckScript(ctx context.Context, python string, src io.Reader) (Script, error) {
	data, err := io.ReadAll(io.LimitReader(src, MaxScriptSize+1))
	if err != nil {
		return Script{}, err
	}
	if len(data) > MaxScriptSize {
		return Script{}, fmt.Errorf("the script is larger than %d KB: keep data in the dataset, not in the script", MaxScriptSize>>10)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// -I: isolated (no user site, no PYTHON* variables, no script dir on path).
	cmd := exec.CommandContext(ctx, python, "-I", "-c", checkScriptPy)
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Script{}, fmt.Errorf("checking the script with %s: %v: %s", python, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var s Script
	if err := json.Unmarshal(out, &s); err != nil {
		return Script{}, fmt.Errorf("reading the script checker's answer: %w", err)
	}
	s.Size = int64(len(data))
	return s, nil
}

// Problem is the sentence to show for a script that cannot run, or "".
func (s Script) Problem(name string) string {
	switch {
	case s.SyntaxError != "":
		return fmt.Sprintf("%s has a syntax error on line %d: %s. Fix it and upload the script again.", name, s.SyntaxLine, s.SyntaxError)
	case !s.MainFound:
		return fmt.Sprintf("%s has no top-level main() function. Add `def main():` at the top level of the file; GaaS calls it to start training.", name)
	}
	return ""
}
