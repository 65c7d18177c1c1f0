package explain

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trisparc/gaas/protocol"
	"github.com/trisparc/gaas/sandbox"
)

// runScript runs a real script through the real sandbox and returns its
// stderr lines: the tracebacks below are Python's own.
func runScript(t *testing.T, sb *sandbox.Sandbox, script string) []string {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "input"), 0o755)
	os.WriteFile(filepath.Join(dir, "input", "train.py"), []byte(script), 0o644)
	os.WriteFile(filepath.Join(dir, "input", "data.csv"), []byte("age,income,target\n31,50000,1\n"), 0o644)
	var mu sync.Mutex
	var stderr []string
	res, err := sb.Run(context.Background(), sandbox.Spec{Dir: dir, Script: "train.py", Dataset: "data.csv", Output: func(stream, line string) {
		mu.Lock()
		defer mu.Unlock()
		if stream == "stderr" {
			stderr = append(stderr, line)
		}
	}})

	if err != nil || res.Outcome == sandbox.Completed {
		t.Fatalf("the script was meant to fail: %+v %v", res, err)
	}
	return stderr
}

func TestSentenceFromRealTracebacks(t *testing.T) {
	sb, err := sandbox.New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	header := []string{"age", "income", "target"}
	for _, tc := range []struct {
		name, script, want string
	}{
		{"missing column (DictReader)", "import csv, os\ndef main():\n    for row in csv.DictReader(open(os.environ['GAAS_DATASET'])):\n        row['label']\n",
			"Your script asked for a column named 'label', but the dataset's columns are: age, income, target."},
		{"missing package", "import torch\ndef main():\n    pass\n",
			"Your script imports 'torch', which is not installed. Add it as a package chip (for example torch) and retry."},
		{"missing submodule", "import sklearn.linear_model\ndef main():\n    pass\n",
			"Your script imports 'sklearn', which is not installed. Add it as a package chip (for example sklearn) and retry."},
		{"missing file", "def main():\n    open('weights.bin')\n",
			"Your script tried to open a file that does not exist ([Errno 2] No such file or directory: 'weights.bin'). Read the dataset from the path in $GAAS_DATASET and write the model into $GAAS_OUTPUT."},
		{"memory", "def main():\n    raise MemoryError()\n",
			"Your script ran out of memory. Use a smaller batch or dataset, or pick the next tier up."},
		{"syntax error in an imported module", "import os\ndef main():\n    exec(compile('x = = 1', 'model_def.py', 'exec'))\n",
			"Your script has a syntax error in model_def.py on line 1: invalid syntax."},
		{"GPU out of memory", "class OutOfMemoryError(RuntimeError): pass\ndef main():\n    raise OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 11.76 GiB total capacity)')\n",
			"Your script ran out of GPU memory (VRAM). Use a smaller batch or model, or pick the next tier up, which has more VRAM."},
		{"anything else", "def main():\n    raise ValueError('learning rate must be positive')\n",
			"Your script stopped with ValueError: learning rate must be positive."},
		{"present column, other KeyError", "def main():\n    {}['age']\n",
			"Your script stopped with KeyError: 'age'."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr := runScript(t, sb, tc.script)
			got := Sentence(Failure{Cause: protocol.CauseScript, Stderr: stderr, Header: header})
			if got != tc.want {
				t.Fatalf("got  %q\nwant %q\ntraceback:\n%s", got, tc.want, strings.Join(stderr, "\n"))
			}
			if tb := Traceback(stderr); !strings.HasPrefix(tb, "Traceback (most recent call last):") {
				t.Fatalf("traceback %q", tb)
			}
		})
	}
}

func TestSentenceForCauses(t *testing.T) {
	for cause, want := range map[string]string{
		protocol.CauseNoModel:  "saved no model",
		protocol.CauseCap:      "budget cap of 1h0m0s",
		protocol.CauseNoMain:   "no main() function",
		protocol.CausePackages: "Installing your packages failed: No matching distribution found for torchh.",
	} {
		got := Sentence(Failure{Cause: cause, CapSeconds: 3600, Stderr: []string{"pip: ERROR: No matching distribution found for torchh"}})
		if !strings.Contains(got, want) {
			t.Errorf("%s: %q lacks %q", cause, got, want)
		}
	}
	if got := Sentence(Failure{Reason: "the script exited with status 3"}); got != "The job failed: the script exited with status 3." {
		t.Errorf("no traceback: %q", got)
	}
}
