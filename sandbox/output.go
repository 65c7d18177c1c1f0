package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Bounds on what a job may hand back as its model.
const (
	MaxOutputFiles = 10000
	MaxOutputDepth = 32
)

// Output is what a job left in its output folder, checked.
type Output struct {
	Path  string // the one file, or the output folder
	Name  string // the file's name, or "model" for a folder
	Files int
	Bytes int64
}

// ErrNoOutput means the script wrote nothing to $GAAS_OUTPUT.
var ErrNoOutput = errors.New("main() returned but wrote nothing to $GAAS_OUTPUT")

// CheckOutput checks a finished job's output folder without following any
// link: the folder must be a real folder holding only regular files and
// folders, none sparse, within the file count, depth and size limits.
// Nothing of the job may still be running when it is called.
func CheckOutput(jobDir string, maxBytes int64) (Output, error) {
	out := filepath.Join(jobDir, "output")
	fi, err := os.Lstat(out)
	if err != nil || !fi.IsDir() {
		return Output{}, errors.New("$GAAS_OUTPUT was replaced by something that is not a folder")
	}
	res := Output{Path: out, Name: "model"}
	entries := 0
	err = filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(out, path)
		if rel == "." {
			return nil
		}
		if depth := strings.Count(rel, string(filepath.Separator)) + 1; depth > MaxOutputDepth {
			return fmt.Errorf("the output is nested deeper than %d folders", MaxOutputDepth)
		}
		info, err := d.Info() // Lstat: links are not followed
		if err != nil {
			return err
		}
		if entries++; entries > MaxOutputFiles {
			return fmt.Errorf("the output holds more than %d files and folders", MaxOutputFiles)
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("the output holds a link (%s); save real files instead", rel)
		case info.IsDir():
			return nil
		case !info.Mode().IsRegular():
			return fmt.Errorf("the output holds %s, which is not a regular file", rel)
		}
		res.Files++
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < info.Size()-64<<10 {
			return fmt.Errorf("the output file %s is sparse (%d bytes long but mostly holes)", rel, info.Size())
		}
		if res.Bytes += info.Size(); res.Bytes > maxBytes {
			return fmt.Errorf("the output is larger than %s", bytesString(maxBytes))
		}
		return nil
	})
	if err != nil {
		return Output{}, err
	}
	if res.Files == 0 {
		return Output{}, ErrNoOutput
	}
	if entries, _ := os.ReadDir(out); len(entries) == 1 && entries[0].Type().IsRegular() {
		res.Path, res.Name = filepath.Join(out, entries[0].Name()), entries[0].Name()
	}
	return res, nil
}

// Export copies a checked output into dir (a file as itself, a folder as
// dir/model), refusing to overwrite anything.
func (o Output) Export(dir string) (string, error) {
	dst := filepath.Join(dir, o.Name)
	if _, err := os.Lstat(dst); err == nil {
		return "", fmt.Errorf("%s already exists", dst)
	}
	err := filepath.WalkDir(o.Path, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(o.Path, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(path, target)
	})
	return dst, err
}

func copyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
