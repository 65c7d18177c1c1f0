package node

import (
	"archive/tar"
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
func (n *Node) Model(ctx context.Context, id string) (*api.ModelFile, error) {
	j, err := n.job(id)
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
		return &api.ModelFile{Name: j.Model.Name, CID: j.Model.CID, Size: j.Model.Size, ContentType: ct, Body: nd}, nil
	case files.Directory:
		if !n.enter() {
			nd.Close()
			return nil, api.Errorf(http.StatusServiceUnavailable, api.CodeUnavailable, "The node is shutting down.")
		}
		pr, pw := io.Pipe()
		go func() {
			defer n.leave()
			defer nd.Close()
			pw.CloseWithError(writeTarGz(pw, nd))
		}()
		return &api.ModelFile{Name: j.Model.Name + ".tar.gz", CID: j.Model.CID, Size: -1, ContentType: "application/gzip", Body: pr}, nil
	}
	nd.Close()
	return nil, fmt.Errorf("model %s is neither a file nor a folder", c)
}

func writeTarGz(w io.Writer, dir files.Directory) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	err := files.Walk(dir, func(path string, nd files.Node) error {
		if path == "" {
			return nil
		}
		// Names come from the provider's DAG: none may climb out of the archive.
		for _, part := range strings.Split(path, "/") {
			if part == "" || part == "." || part == ".." || strings.ContainsAny(part, "\\\x00") {
				return fmt.Errorf("the model holds an unsafe file name %q", path)
			}
		}
		switch nd := nd.(type) {
		case files.Directory:
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: 0o755})
		case files.File:
			size, err := nd.Size()
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: 0o644, Size: size}); err != nil {
				return err
			}
			_, err = io.Copy(tw, nd)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
