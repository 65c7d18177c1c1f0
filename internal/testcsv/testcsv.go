// Package testcsv writes large, realistic CSV files for benchmarks.
package testcsv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Header is the first line Write writes.
const Header = "id,age,income,city,score,label"

// Columns is how many columns the file has.
const Columns = 6

// Write writes a CSV of about size bytes to path (every row has a quoted
// field with a comma in it) and returns its exact size.
func Write(path string, size int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	n, _ := fmt.Fprintln(w, Header)
	written := int64(n)
	for i := 0; written < int64(size); i++ {
		n, _ := fmt.Fprintf(w, "%d,%d,%d.%02d,\"Pune, MH\",%d.%d,%d\n", i, 18+i%60, 20000+i%90000, i%100, i%1000, i%10, i%2)
		written += int64(n)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	return written, f.Close()
}

// ForBenchmark writes the benchmarks' CSV into b's temporary folder: 256
// MiB, or GAAS_BENCH_CSV_MB (the figure is 1024). It returns the
// path and the exact size.
func ForBenchmark(b *testing.B) (string, int64) {
	mb := 256
	if v := os.Getenv("GAAS_BENCH_CSV_MB"); v != "" {
		fmt.Sscan(v, &mb)
	}
	path := filepath.Join(b.TempDir(), "big.csv")
	written, err := Write(path, mb<<20)
	if err != nil {
		b.Fatal(err)
	}
	return path, written
}
