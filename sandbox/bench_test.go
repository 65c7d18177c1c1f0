package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/trisparc/gaas/internal/testwheel"
)

// BenchmarkStartup measures, in the same run, starting Python plainly
// and starting the same script through the whole sandbox (gate, cgroup,
// rlimits, bubblewrap, runner), and reports the overhead per job.
func BenchmarkStartup(b *testing.B) {
	s, err := New(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	os.MkdirAll(filepath.Join(dir, "input"), 0o755)
	os.WriteFile(filepath.Join(dir, "input", "train.py"), []byte("def main():\n    pass\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "input", "data.csv"), nil, 0o644)
	script := filepath.Join(dir, "input", "train.py")
	var plain, boxed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := exec.Command(s.python, "-I", "-u", "-c", "import runpy; runpy.run_path('"+script+"')['main']()").Run(); err != nil {
			b.Fatal(err)
		}
		plain += time.Since(start)
		start = time.Now()
		res, err := s.Run(context.Background(), Spec{Dir: dir, Script: "train.py", Dataset: "data.csv"})
		if err != nil || res.Outcome != Completed {
			b.Fatalf("%+v %v", res, err)
		}
		boxed += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(plain.Microseconds())/n/1000, "plain-ms/op")
	b.ReportMetric(float64(boxed.Microseconds())/n/1000, "sandboxed-ms/op")
	b.ReportMetric(float64((boxed-plain).Microseconds())/n/1000, "overhead-ms/op")
	b.ReportMetric(float64(boxed)/float64(plain), "ratio")
}

// BenchmarkCachedEnv measures reusing an installed package environment
// against the first install of it.
func BenchmarkCachedEnv(b *testing.B) {
	s, err := New(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	wheels := b.TempDir()
	testwheel.Build(wheels, "gaas-tiny", "1.0", map[string]string{"gaas_tiny/__init__.py": "X = 1\n"})
	s.PipFindLinks, s.EnvDir = wheels, b.TempDir()
	start := time.Now()
	if _, res, err := s.Install(context.Background(), []string{"gaas-tiny"}, nil); err != nil || res.Outcome != Completed {
		b.Fatalf("%+v %v", res, err)
	}
	first := time.Since(start)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := s.Install(context.Background(), []string{"gaas-tiny"}, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(first.Milliseconds()), "first-install-ms")
}
