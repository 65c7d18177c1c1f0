package inputs

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
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
	Line     int64 // 1-based line the problem was found on; 0 if none
	Reason   string
	TooLarge bool // the file is over the size limit
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
	// The header went through encoding/csv; the rows go through a scanner
	// that counts fields with vectorised byte counts and only walks a
	// line byte by byte when it holds a quote.
	line, _ := cr.FieldPos(len(header) - 1)
	line += strings.Count(header[len(header)-1], "\n")
	rows, err := scanRows(br, delim, len(header), line)
	if err != nil {
		if counted.n > limit {
			return Dataset{}, tooLarge(limit)
		}
		return Dataset{}, err
	}
	ds.Rows = rows
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
	return &CSVError{TooLarge: true, Reason: fmt.Sprintf("The dataset is larger than this node accepts (%d MB). Use a smaller sample, or raise the node's limit.", limit>>20)}
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

// scanRows counts the data rows after the header, checking that each has
// cols fields and is UTF-8. line is the header's last line. Runs of plain
// lines are counted a buffer at a time (fastRows); any line that is not
// plain, and any problem, goes through nextRecord, which reads one record
// carefully and names the line.
func scanRows(br *bufio.Reader, delim byte, cols, line int) (int64, error) {
	var rows int64
	for {
		// Only what is buffered: forcing a refill here would move the
		// buffer's tail on every record the careful path reads.
		if buf, _ := br.Peek(br.Buffered()); len(buf) > 0 {
			n, used, lines := fastRows(buf, delim, cols)
			rows, line = rows+n, line+lines
			br.Discard(used)
			if used > 0 {
				continue
			}
		}
		row, eof, err := nextRecord(br, delim, cols, &line)
		if err != nil {
			return rows, err
		}
		if row {
			rows++
		}
		if eof {
			return rows, nil
		}
	}
}

// nextRecord reads one record: whether it is a row (not a blank line),
// and whether the input ended with it.
func nextRecord(br *bufio.Reader, delim byte, cols int, line *int) (row, eof bool, err error) {
	var long []byte // a line longer than the buffer, put together
	for {
		chunk, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, chunk...)
			continue
		}
		if err != nil && err != io.EOF {
			return false, false, err
		}
		eof = err == io.EOF
		rec := chunk
		if long != nil {
			rec = append(long, chunk...)
		}
		if len(rec) == 0 && eof {
			return false, true, nil
		}
		*line++
		body := trimEOL(rec)
		switch {
		case len(body) == 0: // a blank line
			return false, eof, nil
		case bytes.IndexByte(body, '"') < 0:
			if n := bytes.Count(body, []byte{delim}) + 1; n != cols {
				return false, false, fieldCountError(*line)
			}
			if !utf8.Valid(body) {
				return false, false, utf8Error(*line)
			}
			return true, eof, nil
		default:
			start := *line
			n, perr := scanQuoted(br, rec, delim, line)
			if perr != nil {
				return false, false, perr
			}
			if n != cols {
				return false, false, fieldCountError(start)
			}
			return true, eof, nil
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

func fieldCountError(line int) error {
	return &CSVError{Line: int64(line), Reason: fmt.Sprintf("Line %d of the dataset has a different number of columns from the header. Every row needs the same columns as the first one.", line)}
}

func quoteError(line int) error {
	return &CSVError{Line: int64(line), Reason: fmt.Sprintf("Line %d of the dataset has a stray or unclosed quote (\"). Fix the quoting on that line.", line)}
}

func utf8Error(line int) error {
	return &CSVError{Line: int64(line), Reason: fmt.Sprintf("Line %d of the dataset is not valid UTF-8 text. Save the file with UTF-8 encoding and upload it again.", line)}
}

// scanQuoted counts the fields of one record that holds quotes, reading
// further lines while a quoted field runs on, one line at a time, so time
// and memory stay linear however many lines a field spans. *line advances
// past the lines it read. Between quotes it counts delimiters in whole
// stretches, as the quote-free path does. A failed read is returned as it
// is: only the end of the input inside quotes is the file's fault.
func scanQuoted(br *bufio.Reader, first []byte, delim byte, line *int) (int, error) {
	start := *line
	body := trimEOL(first)
	fields, inQuote := 1, false
	for {
		if !utf8.Valid(body) { // no rune holds a newline: lines can be checked alone
			return 0, utf8Error(start)
		}
		for pos := 0; pos < len(body); {
			if inQuote {
				c := bytes.IndexByte(body[pos:], '"')
				if c < 0 {
					break // the field runs on into the next line
				}
				i := pos + c
				if i+1 < len(body) && body[i+1] == '"' {
					pos = i + 2 // an escaped quote
					continue
				}
				inQuote, pos = false, i+1
				if pos < len(body) && body[pos] != delim {
					return 0, quoteError(start) // text after a closing quote
				}
				continue
			}
			q := bytes.IndexByte(body[pos:], '"')
			if q < 0 {
				fields += bytes.Count(body[pos:], []byte{delim})
				break
			}
			seg := body[pos : pos+q]
			fields += bytes.Count(seg, []byte{delim})
			// A quote opens a field only at its start.
			if q > 0 && seg[len(seg)-1] != delim || q == 0 && pos > 0 && body[pos-1] != delim {
				return 0, quoteError(start)
			}
			inQuote, pos = true, pos+q+1
		}
		if !inQuote {
			return fields, nil
		}
		more, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return 0, err
		}
		if len(more) == 0 {
			return 0, quoteError(start) // the file ends inside quotes
		}
		*line++
		body = trimEOL(more)
	}
}
