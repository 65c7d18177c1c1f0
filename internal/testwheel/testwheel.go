// Package testwheel builds minimal pure-Python wheels, so tests can
// install packages with pip without reaching an index.
package testwheel

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Build writes NAME-VERSION-py3-none-any.whl into dir holding files
// (paths relative to site-packages) and returns its path.
func Build(dir, name, version string, files map[string]string) (string, error) {
	dist := strings.NewReplacer("-", "_", ".", "_").Replace(name)
	info := fmt.Sprintf("%s-%s.dist-info", dist, version)
	all := map[string]string{
		info + "/METADATA": fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", name, version),
		info + "/WHEEL":    "Wheel-Version: 1.0\nGenerator: gaas-testwheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for p, body := range files {
		all[p] = body
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	path := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", dist, version))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	var record strings.Builder
	for _, p := range paths {
		w, err := zw.Create(p)
		if err != nil {
			return "", err
		}
		w.Write([]byte(all[p]))
		sum := sha256.Sum256([]byte(all[p]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", p, base64.RawURLEncoding.EncodeToString(sum[:]), len(all[p]))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", info)
	w, err := zw.Create(info + "/RECORD")
	if err != nil {
		return "", err
	}
	w.Write([]byte(record.String()))
	return path, zw.Close()
}
