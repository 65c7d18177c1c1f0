package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/trisparc/gaas/api"
	"github.com/trisparc/gaas/inputs"
	"github.com/trisparc/gaas/store"
)

// checkFileName refuses names that are not plain file names with ext.
func checkFileName(name, ext, what string) error {
	if name != filepath.Base(name) || strings.ContainsAny(name, "\x00/\\") || name == "." || name == ".." || len(name) > 200 {
		return api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "%q is not a plain file name for the %s.", name, what)
	}
	if !strings.EqualFold(filepath.Ext(name), ext) {
		return api.Errorf(http.StatusBadRequest, api.CodeInvalidInput, "The %s must be a %s file; %q is not.", what, ext, name)
	}
	return nil
}

// UploadDataset checks a CSV while storing it as blocks, in one pass over
// the upload. A file that fails the check leaves nothing behind.
func (n *Node) UploadDataset(ctx context.Context, name string, r io.Reader) (api.Dataset, error) {
	if err := checkFileName(name, ".csv", "dataset"); err != nil {
		return api.Dataset{}, err
	}
	r = meteredReader{r, n.metrics.apiBytes.WithLabelValues("upload")}
	var info inputs.Dataset
	c, err := n.blocks.ImportChecked(ctx, r, func(r io.Reader) (err error) {
		info, err = inputs.InspectCSV(r, n.cfg.MaxDatasetBytes)
		return err
	})
	if err != nil {
		var ce *inputs.CSVError
		if errors.As(err, &ce) && ce.TooLarge {
			return api.Dataset{}, &api.Error{Status: http.StatusRequestEntityTooLarge, Code: api.CodeTooLarge, Message: ce.Reason}
		}
		if errors.As(err, &ce) {
			return api.Dataset{}, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeInvalidInput, Message: ce.Reason, Details: map[string]any{"line": ce.Line}}
		}
		return api.Dataset{}, fmt.Errorf("receiving the dataset: %w", err)
	}
	in := store.Input{CID: c.String(), Name: name, Size: info.Size, Rows: info.Rows, Columns: info.Columns, Header: info.Header}
	if err := n.store.PutUpload(store.Upload{Input: in, Account: api.AccountFrom(ctx), Kind: "dataset", At: time.Now()}); err != nil {
		return api.Dataset{}, err
	}
	return api.Dataset{CID: in.CID, Name: name, Size: info.Size, Rows: info.Rows, Columns: info.Columns, Header: info.Header, Delimiter: info.Delimiter}, nil
}

// UploadScript checks that a script parses and defines main(), then stores it.
func (n *Node) UploadScript(ctx context.Context, name string, r io.Reader) (api.Script, error) {
	if err := checkFileName(name, ".py", "script"); err != nil {
		return api.Script{}, err
	}
	r = meteredReader{r, n.metrics.apiBytes.WithLabelValues("upload")}
	src, err := io.ReadAll(io.LimitReader(r, inputs.MaxScriptSize+1))
	if err != nil {
		return api.Script{}, fmt.Errorf("receiving the script: %w", err)
	}
	if len(src) > inputs.MaxScriptSize {
		return api.Script{}, api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "The script is larger than %d KB: keep data in the dataset, not in the script.", inputs.MaxScriptSize>>10)
	}
	info, err := inputs.CheckScript(ctx, n.python, bytes.NewReader(src))
	if err != nil {
		return api.Script{}, err
	}
	if problem := info.Problem(name); problem != "" {
		return api.Script{}, &api.Error{Status: http.StatusUnprocessableEntity, Code: api.CodeInvalidInput, Message: problem, Details: info}
	}
	c, err := n.blocks.ImportFile(ctx, bytes.NewReader(src))
	if err != nil {
		return api.Script{}, fmt.Errorf("storing the script: %w", err)
	}
	in := store.Input{CID: c.String(), Name: name, Size: int64(len(src))}
	if err := n.store.PutUpload(store.Upload{Input: in, Account: api.AccountFrom(ctx), Kind: "script", At: time.Now()}); err != nil {
		return api.Script{}, err
	}
	return api.Script{CID: in.CID, Name: name, Size: in.Size, MainFound: true, MainAsync: info.MainAsync, MainLine: info.MainLine}, nil
}

// CheckPackages checks package chips one by one, for a form to mark each.
func (n *Node) CheckPackages(ctx context.Context, chips []string) (api.PackageCheck, error) {
	res := api.PackageCheck{OK: true, Chips: inputs.CheckChips(chips)}
	for _, c := range res.Chips {
		res.OK = res.OK && c.Error == ""
	}
	return res, nil
}
