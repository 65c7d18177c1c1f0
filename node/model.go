package node

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/ipfs/boxo/files"
	"github.com/ipfs/go-cid"
	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/store"
)

// Model opens a completed job's model from the local blockstore: a single
// file as itself, a folder as a .tar.gz streamed as it is read.
func (n *Node) Model(ctx context.Context, id, format string) (*api.ModelFile, error) {
	if format != "" && format != "zip" && format != "tar.gz" {
		return nil, api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "A model downloads as zip or tar.gz, not %q.", format)
	}
	j, err := n.job(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.State != store.Completed || j.Model == nil {
		return nil, api.Errorf(http.StatusConflict, api.CodeConflict, "Job %s has no model to download: it is %s.", id, j.State)
	}
	c, err := cid.Decode(j.Model.CID)
	if err != nil {
		return nil, err
	}
	nd, err := n.blocks.Node(ctx, c)
	if err != nil {
		return nil, err
	}
	switch nd := nd.(type) {
	case files.File:
		ct := mime.TypeByExtension(filepath.Ext(j.Model.Name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		m := &api.ModelFile{Name: j.Model.Name, CID: j.Model.CID, Size: j.Model.Size, ContentType: ct}
		if rs, ok := nd.(io.ReadSeekCloser); ok { // served with ranges
			m.Body = meteredFile(rs, n.metrics.apiBytes.WithLabelValues("download"))
		} else {
			m.Body = meteredStream(nd, n.metrics.apiBytes.WithLabelValues("download"))
		}
		return m, nil
	case files.Directory:
		if !n.enter() {
			nd.Close()
			return nil, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "The node is shutting down.")
		}
		pr, pw := io.Pipe()
		name, ct, write := j.Model.Name+".tar.gz", "application/gzip", writeTarGz
		if format == "zip" {
			name, ct, write = j.Model.Name+".zip", "application/zip", writeZip
		}
		go func() {
			defer n.leave()
			defer nd.Close()
			pw.CloseWithError(write(pw, nd))
		}()
		return &api.ModelFile{Name: name, CID: j.Model.CID, Size: -1, ContentType: ct, Body: meteredStream(pr, n.metrics.apiBytes.WithLabelValues("download"))}, nil
	}
	nd.Close()
	return nil, fmt.Errorf("model %s is neither a file nor a folder", c)
}

// walkModel calls file for each file of a model folder, and dir for each
// folder, with paths checked: names come from the provider's DAG, and none
// may climb out of the archive.
func walkModel(root files.Directory, dir func(path string) error, file func(path string, size int64, r io.Reader) error) error {
	return files.Walk(root, func(path string, nd files.Node) error {
		if path == "" {
			return nil
		}
		for _, part := range strings.Split(path, "/") {
			if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "\\\x00") {
				return fmt.Errorf("the model holds an unsafe file name %q", path)
			}
		}
		switch nd := nd.(type) {
		case files.Directory:
			return dir(path)
		case files.File:
			size, err := nd.Size()
			if err != nil {
				return err
			}
			return file(path, size, nd)
		}
		return nil
	})
}

func writeTarGz(w io.Writer, root files.Directory) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	err := walkModel(root,
		func(path string) error {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: 0o755})
		},
		func(path string, size int64, r io.Reader) error {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: 0o644, Size: size}); err != nil {
				return err
			}
			_, err := io.Copy(tw, r)
			return err
		})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeZip(w io.Writer, root files.Directory) error {
	zw := zip.NewWriter(w)
	err := walkModel(root,
		func(path string) error {
			_, err := zw.Create(path + "/")
			return err
		},
		func(path string, size int64, r io.Reader) error {
			f, err := zw.Create(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, r)
			return err
		})
	if err != nil {
		return err
	}
	return zw.Close()
}
