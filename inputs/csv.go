package inputs

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Dataset describes a CSV file.
type Dataset struct {
	Rows      int64    `json:"rows"` // data rows, header excluded
	Columns   int      `json:"columns"`
	Header    []string `json:"header"`
	Delimiter string   `json:"delimiter"`
	Size      int64    `json:"size"`
}

// CSVError is a dataset that cannot be used, with the reason for the user.
type CSVError struct {
	Line   int64 // 1-based line the problem was found on; 0 if none
	Reason string
}

func (e *CSVError) Error() string { return e.Reason }

var errEmpty = &CSVError{Reason: "The dataset is empty: it needs a header row and at least one row of data."}

var delimiters = []byte{',', ';', '\t', '|'}

// InspectCSV reads a whole CSV from r (at most limit bytes) and describes
// it. It streams: memory does not grow with the file.
func InspectCSV(r io.Reader, limit int64) (Dataset, error) {
	counted := &countingReader{r: io.LimitReader(r, limit+1)}
	br := bufio.NewReaderSize(counted, 64<<10)
	first, err := br.Peek(64 << 10)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return Dataset{}, err
	}
	if len(bytes.TrimSpace(first)) == 0 {
		return Dataset{}, errEmpty
	}
	if bytes.IndexByte(first, 0) >= 0 {
		return Dataset{}, &CSVError{Reason: "The dataset is not a CSV file: it contains binary data. Export it from your spreadsheet as CSV (comma-separated values)."}
	}
	if bom := []byte("\xef\xbb\xbf"); bytes.HasPrefix(first, bom) { // Excel writes one
		first = first[len(bom):]
		br.Discard(len(bom))
	}
	delim := sniffDelimiter(firstLine(first))

	cr := csv.NewReader(br)
	cr.Comma = rune(delim)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return Dataset{}, errEmpty
	}
	if err != nil {
		return Dataset{}, csvReadError(err, counted, limit)
	}
	ds := Dataset{Columns: len(header), Header: append([]string(nil), header...), Delimiter: string(delim)}
	for i, h := range ds.Header {
		if !utf8.ValidString(h) {
			return Dataset{}, &CSVError{Line: 1, Reason: "The dataset's header is not valid UTF-8 text. Save the file with UTF-8 encoding and upload it again."}
		}
		if h == "" {
			return Dataset{}, &CSVError{Line: 1, Reason: fmt.Sprintf("Column %d of the header has no name. Give every column a name in the first row.", i+1)}
		}
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Dataset{}, csvReadError(err, counted, limit)
		}
		if len(rec) == 1 && rec[0] == "" {
			continue // blank line
		}
		for _, f := range rec {
			if !utf8.ValidString(f) {
				line, _ := cr.FieldPos(0)
				return Dataset{}, &CSVError{Line: int64(line), Reason: fmt.Sprintf("Line %d of the dataset is not valid UTF-8 text. Save the file with UTF-8 encoding and upload it again.", line)}
			}
		}
		ds.Rows++
	}
	if counted.n > limit {
		return Dataset{}, tooLarge(limit)
	}
	if ds.Rows == 0 {
		return Dataset{}, &CSVError{Line: 1, Reason: "The dataset has a header but no rows of data."}
	}
	ds.Size = counted.n
	return ds, nil
}

func tooLarge(limit int64) error {
	return &CSVError{Reason: fmt.Sprintf("The dataset is larger than this node accepts (%d MB). Use a smaller sample, or raise the node's limit.", limit>>20)}
}

func csvReadError(err error, counted *countingReader, limit int64) error {
	if counted.n > limit {
		return tooLarge(limit)
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		switch {
		case errors.Is(pe.Err, csv.ErrFieldCount):
			return &CSVError{Line: int64(pe.StartLine), Reason: fmt.Sprintf("Line %d of the dataset has a different number of columns from the header. Every row needs the same columns as the first one.", pe.StartLine)}
		case errors.Is(pe.Err, csv.ErrQuote), errors.Is(pe.Err, csv.ErrBareQuote):
			return &CSVError{Line: int64(pe.StartLine), Reason: fmt.Sprintf("Line %d of the dataset has a stray or unclosed quote (\"). Fix the quoting on that line.", pe.StartLine)}
		}
		return &CSVError{Line: int64(pe.StartLine), Reason: fmt.Sprintf("Line %d of the dataset could not be read as CSV: %v.", pe.StartLine, pe.Err)}
	}
	return err
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

// sniffDelimiter picks the candidate that appears most often outside
// quotes in the header line; a comma when none does.
func sniffDelimiter(line []byte) byte {
	best, bestN := byte(','), 0
	for _, d := range delimiters {
		n, quoted := 0, false
		for _, c := range line {
			if c == '"' {
				quoted = !quoted
			} else if c == d && !quoted {
				n++
			}
		}
		if n > bestN {
			best, bestN = d, n
		}
	}
	return best
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
