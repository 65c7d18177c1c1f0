package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// installWall bounds one pip install.
const installWall = 20 * time.Minute

// EnvKey names the environment for a package set: the same chips, in any
// order, with the same Python and the same package source, share one.
func (s *Sandbox) EnvKey(packages []string) string {
	sorted := append([]string(nil), packages...)
	for i := range sorted {
		sorted[i] = strings.ToLower(sorted[i])
	}
	sort.Strings(sorted)
	h := sha256.New()
	fmt.Fprintf(h, "python %s\nindex %s\nlinks %s\n", s.version, s.PipIndexURL, s.PipFindLinks)
	for _, p := range sorted {
		fmt.Fprintln(h, p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// Install makes the environment for packages and returns its folder, for
// Spec.Env. An environment installed before is reused at once. The
// install runs sandboxed too (a package's build can run code): the
// network is allowed, the host's files are not visible, and only the new
// environment is writable. With no packages it returns "".
func (s *Sandbox) Install(ctx context.Context, packages []string, output func(stream, line string)) (string, Result, error) {
	if len(packages) == 0 {
		return "", Result{Outcome: Completed}, nil
	}
	root := s.EnvDir
	if root == "" {
		root = filepath.Join(os.TempDir(), "gaas-envs")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", Result{}, err
	}
	env := filepath.Join(root, s.EnvKey(packages))
	if fi, err := os.Stat(env); err == nil && fi.IsDir() {
		return env, Result{Outcome: Completed}, nil
	}
	tmp, err := os.MkdirTemp(root, ".installing-")
	if err != nil {
		return "", Result{}, err
	}
	defer os.RemoveAll(tmp) // gone once renamed
	var args []string
	// Name resolution and the public certificates only: /etc/ssl also
	// holds private keys.
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/ssl/certs", "/etc/ca-certificates", "/usr/share/ca-certificates"} {
		args = append(args, "--ro-bind-try", f, f)
	}
	// Wheels only: installing a wheel runs none of the package's code,
	// where building a source distribution runs its setup.py with the
	// network on.
	pip := []string{s.python, "-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-cache-dir",
		"--progress-bar", "off", "--only-binary", ":all:", "--target", PackagesDir}
	if s.PipFindLinks != "" {
		args = append(args, "--ro-bind", s.PipFindLinks, "/opt/gaas/wheels")
		pip = append(pip, "--no-index", "--find-links", "/opt/gaas/wheels")
	} else if s.PipIndexURL != "" {
		pip = append(pip, "--index-url", s.PipIndexURL)
	}
	// "--" ends pip's options: a package name can never be read as one.
	pip = append(append(pip, "--"), packages...)
	args = append(args,
		"--bind", tmp, PackagesDir,
		"--chdir", "/tmp",
		"--setenv", "HOME", "/tmp",
		"--setenv", "PIP_NO_WARN_SCRIPT_LOCATION", "1",
		"--setenv", "PIP_ROOT_USER_ACTION", "ignore",
		"--")
	lim := s.limits(Limits{Wall: installWall})
	res, err := s.exec(ctx, run{args: append(args, pip...), lim: lim, output: output, diskDir: tmp})
	if err != nil || res.Outcome != Completed {
		return "", res, err
	}
	if err := os.Rename(tmp, env); err != nil {
		if _, statErr := os.Stat(env); statErr == nil {
			return env, res, nil // installed meanwhile by another job
		}
		return "", res, err
	}
	return env, res, nil
}
