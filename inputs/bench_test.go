package inputs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/trisparc/gaas/internal/testcsv"
)

// BenchmarkInspectCSV checks a large CSV streamed from disk, reporting
// its throughput beside a plain read of the same file in the same run,
// and the heap it needed. Set GAAS_BENCH_CSV_MB for the size (default
// 256; the figure is 1024).
func BenchmarkInspectCSV(b *testing.B) {
	mb := 256
	if v := os.Getenv("GAAS_BENCH_CSV_MB"); v != "" {
		fmt.Sscan(v, &mb)
	}
	path := filepath.Join(b.TempDir(), "big.csv")
	written, err := testcsv.Write(path, mb<<20)
	if err != nil {
		b.Fatal(err)
	}
	size := float64(written)

	var plain, inspect time.Duration
	var peak uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, _ := os.Open(path)
		start := time.Now()
		io.Copy(io.Discard, f)
		plain += time.Since(start)
		f.Close()

		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		f, _ = os.Open(path)
		start = time.Now()
		ds, err := InspectCSV(f, 1<<40)
		inspect += time.Since(start)
		f.Close()
		if err != nil || ds.Columns != testcsv.Columns {
			b.Fatalf("%+v %v", ds, err)
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		peak = max(peak, after.HeapInuse)
	}
	n := float64(b.N)
	b.ReportMetric(size/1e6/(plain.Seconds()/n), "plain-MB/s")
	b.ReportMetric(size/1e6/(inspect.Seconds()/n), "inspect-MB/s")
	b.ReportMetric(plain.Seconds()/inspect.Seconds(), "inspect/plain")
	b.ReportMetric(float64(peak)/(1<<20), "heap-MiB")
}
