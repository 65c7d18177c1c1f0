package inputs

import (
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/trisparc/gaas/internal/testcsv"
)

// BenchmarkInspectCSV checks a large CSV streamed from disk, reporting
// its throughput beside a plain read of the same file in the same run,
// and the heap it needed. Set GAAS_BENCH_CSV_MB for the size (default
// 256; the figure is 1024).
func BenchmarkInspectCSV(b *testing.B) {
	path, written := testcsv.ForBenchmark(b)
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

// BenchmarkQuotedFieldOverLines reads one quoted field that spans many
// lines, at two sizes, and reports the rate of each and their ratio: a
// scan that is linear in the input keeps the ratio near 1 (one that
// re-read the field for each new line gave 0.04 here: 0.4 MB/s on the large one).
func BenchmarkQuotedFieldOverLines(b *testing.B) {
	in := func(lines int) string {
		return "h1,h2\n\"" + strings.Repeat("a line of text, inside quotes\n", lines) + "\",x\n"
	}
	small, large := in(1_000), in(32_000)
	rate := func(s string) float64 {
		start := time.Now()
		ds, err := InspectCSV(strings.NewReader(s), 1<<40)
		if err != nil || ds.Rows != 1 {
			b.Fatalf("%+v %v", ds, err)
		}
		return float64(len(s)) / 1e6 / time.Since(start).Seconds()
	}
	var rs, rl float64
	for i := 0; i < b.N; i++ {
		rs += rate(small)
		rl += rate(large)
	}
	b.ReportMetric(rs/float64(b.N), "small-MB/s")
	b.ReportMetric(rl/float64(b.N), "large-MB/s")
	b.ReportMetric(rl/rs, "large/small")
}
