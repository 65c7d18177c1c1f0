// Package metricstest reads Prometheus' text format back, for tests that
// check what a node reports.
package metricstest

import (
	"strconv"
	"strings"
)

// Parse maps each sample, named as written (`gaas_jobs{state="queued"}`),
// to its value. Comment lines are skipped.
func Parse(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}
