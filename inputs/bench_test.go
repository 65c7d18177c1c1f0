package inputs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
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
	f, _ := os.Create(path)
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintln(w, "id,age,income,city,score,label")
	for i := 0; w.Buffered()+int(mustSize(f)) < mb<<20; i++ {
		fmt.Fprintf(w, "%d,%d,%d.%02d,\"Pune, MH\",%d.%d,%d\n", i, 18+i%60, 20000+i%90000, i%100, i%1000, i%10, i%2)
	}
	w.Flush()
	f.Close()
	size := float64(mustSize2(path))

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
		if err != nil || ds.Columns != 6 {
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

func mustSize(f *os.File) int64 { fi, _ := f.Stat(); return fi.Size() }

func mustSize2(p string) int64 { fi, _ := os.Stat(p); return fi.Size() }
