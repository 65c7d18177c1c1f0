package inputs

import (
	"context"
	"encoding/csv"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInspectCSV(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		rows     int64
		header   string
		delim    string
		wantErr  string
		wantLine int64
	}{
		{name: "plain", in: "age,income,target\n31,50000,1\n45,72000,0\n", rows: 2, header: "age|income|target", delim: ","},
		{name: "semicolon", in: "a;b\n1;2\n", rows: 1, header: "a|b", delim: ";"},
		{name: "tab", in: "a\tb\tc\n1\t2\t3\n", rows: 1, header: "a|b|c", delim: "\t"},
		{name: "bom and crlf", in: "\xef\xbb\xbfx,y\r\n1,2\r\n3,4\r\n", rows: 2, header: "x|y", delim: ","},
		{name: "quoted commas", in: "name,note\n\"a, b\",c\n", rows: 1, header: "name|note", delim: ","},
		{name: "no trailing newline", in: "a,b\n1,2", rows: 1, header: "a|b", delim: ","},
		{name: "empty", in: "", wantErr: "empty"},
		{name: "blank", in: "\n\n  \n", wantErr: "empty"},
		{name: "binary", in: "PK\x03\x04\x00\x00", wantErr: "binary"},
		{name: "header only", in: "a,b\n", wantErr: "no rows", wantLine: 1},
		{name: "ragged", in: "a,b\n1,2\n3,4,5\n", wantErr: "Line 3", wantLine: 3},
		{name: "bad quote", in: "a,b\n1,\"x\n", wantErr: "quote", wantLine: 2},
		{name: "latin-1", in: "name,city\nJos\xe9,Pune\n", wantErr: "UTF-8", wantLine: 2},
		{name: "unnamed column", in: "a,,c\n1,2,3\n", wantErr: "Column 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := InspectCSV(strings.NewReader(tc.in), 1<<20)
			if tc.wantErr != "" {
				var ce *CSVError
				if !errors.As(err, &ce) || !strings.Contains(ce.Reason, tc.wantErr) {
					t.Fatalf("err = %v, want a CSVError mentioning %q", err, tc.wantErr)
				}
				if tc.wantLine != 0 && ce.Line != tc.wantLine {
					t.Fatalf("line = %d, want %d", ce.Line, tc.wantLine)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ds.Rows != tc.rows || strings.Join(ds.Header, "|") != tc.header || ds.Delimiter != tc.delim || ds.Columns != len(ds.Header) {
				t.Fatalf("got %+v", ds)
			}
		})
	}
	_, err := InspectCSV(strings.NewReader("a,b\n"+strings.Repeat("1,2\n", 1000)), 100)
	if err == nil || !strings.Contains(err.Error(), "larger") {
		t.Fatalf("over the limit: %v", err)
	}
}

func FuzzInspectCSV(f *testing.F) {
	for _, s := range []string{"a,b\n1,2\n", "a;b\n1;2", "\"x\",y\n\"1\"\"\",2\n", "a\n", "\xef\xbb\xbfa,b\r\n1,2", "a,b\n1,2,3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ds, err := InspectCSV(strings.NewReader(s), 1<<16)
		if err != nil {
			var ce *CSVError
			if !errors.As(err, &ce) || ce.Reason == "" {
				t.Fatalf("error without a reason for the user: %v", err)
			}
			return
		}
		if ds.Rows < 1 || ds.Columns != len(ds.Header) || ds.Columns < 1 {
			t.Fatalf("inconsistent description %+v", ds)
		}
	})
}

func TestCheckPackages(t *testing.T) {
	good := map[string]string{
		"numpy": "numpy", "scikit-learn>=1.3": "scikit-learn>=1.3", "torch == 2.2.0": "torch==2.2.0",
		"pandas[performance]>=2,<3": "pandas[performance]>=2,<3", "zope.interface": "zope.interface", "a": "a",
		"tensorflow~=2.15": "tensorflow~=2.15", "pkg===1.0+local": "pkg===1.0+local",
	}
	for in, want := range good {
		got, err := CheckPackage(in)
		if err != nil || got != want {
			t.Errorf("CheckPackage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"--index-url=http://evil": "pip option", "-e .": "pip option", "https://x/y.whl": "URL",
		"pkg @ https://x": "URL", "./local": "path", "../x": "path", "/tmp/x.whl": "path",
		"numpy; python_version<'3'": "marker", "numpy && rm -rf x": "not a package name", "": "empty",
		"-r requirements.txt": "pip option", "numpy>=": "not a package name", "_x": "not a package name",
	}
	for in, want := range bad {
		if _, err := CheckPackage(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPackage(%q) = %v, want an error mentioning %q", in, err, want)
		}
	}
	if _, err := CheckPackages([]string{"NumPy", "numpy>=1"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
}

func FuzzCheckPackage(f *testing.F) {
	for _, s := range []string{"numpy", "torch==2.2.0", "-e .", "a[b,c]>=1,<2", "https://x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := CheckPackage(s)
		if err != nil {
			return
		}
		if strings.ContainsAny(p, " /\\;@") || strings.HasPrefix(p, "-") || strings.Contains(p, "://") {
			t.Fatalf("accepted %q as %q", s, p)
		}
	})
}

func TestCheckScript(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		main      bool
		syntax    int
	}{
		{"def main", "import csv\n\ndef main():\n    pass\n", true, 0},
		{"async main", "async def main():\n    pass\n", true, 0},
		{"main in a string", "s = 'def main(): pass'\n", false, 0},
		{"main in a comment", "# def main():\nx = 1\n", false, 0},
		{"main in a class", "class T:\n    def main(self):\n        pass\n", false, 0},
		{"nested main", "def outer():\n    def main():\n        pass\n", false, 0},
		{"syntax error", "def main(:\n    pass\n", false, 1},
		{"syntax error later", "def main():\n    pass\n\nx = = 2\n", false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := CheckScript(context.Background(), "python3", strings.NewReader(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if tc.syntax != 0 {
				if s.SyntaxLine != tc.syntax || !strings.Contains(s.Problem("train.py"), "syntax error on line") {
					t.Fatalf("got %+v, want a syntax error on line %d", s, tc.syntax)
				}
				return
			}
			if s.MainFound != tc.main {
				t.Fatalf("main found = %v, want %v", s.MainFound, tc.main)
			}
			if !tc.main && !strings.Contains(s.Problem("train.py"), "no top-level main()") {
				t.Fatalf("problem = %q", s.Problem("train.py"))
			}
		})
	}
}

// FuzzScannerAgreesWithEncodingCSV holds the fast row scanner to
// encoding/csv: on any body after a fixed header, both accept or both
// refuse, and they count the same rows.
func FuzzScannerAgreesWithEncodingCSV(f *testing.F) {
	for _, s := range []string{"1,2\n3,4\n", "\"a,b\",c\n", "\"x\ny\",z\n", "1,\"2\"\"\"\n", "1,2,3\n", "a\"b,c\n", "\"a\"b,c\n", "1,2\r\n\r\n3,4", "\"unclosed,1\n", "\"a\",\"b\"\r\n\"c\",d\r\n", "\"" + strings.Repeat("q", 70) + "\",x\n1,2\n", "1,\"\"\r\n", "\"a\"\"\",b\n\"\"\"\",\"\"\n", "1,\"a\"\rb\n", "\r\n1,2\n\n", "1,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		in := "h1,h2\n" + body
		cr := csv.NewReader(strings.NewReader(in))
		var want int64
		var oracleErr error
		for {
			rec, err := cr.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				oracleErr = err
				break
			}
			for _, f := range rec {
				if !utf8.ValidString(f) {
					oracleErr = errors.New("utf8")
				}
			}
			want++
		}
		want-- // the header
		// The scanner reads 64 bytes at a time: shift the body across
		// every offset in a block, behind one more plain row.
		for shift := -1; shift < 64; shift++ {
			in, want := in, want
			if shift >= 0 {
				in, want = "h1,h2\n1,"+strings.Repeat("9", shift)+"\n"+body, want+1
			}
			ds, err := InspectCSV(strings.NewReader(in), 1<<20)
			switch {
			case oracleErr != nil || want <= 0 || strings.ContainsRune(in, 0): // NUL: the scanner calls the file binary
				if err == nil && oracleErr != nil {
					t.Fatalf("%q (shift %d): encoding/csv refuses (%v), the scanner accepts %d rows", body, shift, oracleErr, ds.Rows)
				}
			case err != nil:
				t.Fatalf("%q (shift %d): encoding/csv reads %d rows, the scanner refuses: %v", body, shift, want, err)
			case ds.Rows != want:
				t.Fatalf("%q (shift %d): encoding/csv reads %d rows, the scanner %d", body, shift, want, ds.Rows)
			}
		}
	})
}

func FuzzCheckScript(f *testing.F) {
	for _, s := range []string{"def main():\n    pass\n", "async def main(): pass", "x = 'def main(): pass'", "def main(:", "class T:\n  def main(self): pass", "\x00", "def main():\n\treturn 1\n" + strings.Repeat("(", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := CheckScript(context.Background(), "python3", strings.NewReader(src))
		if err != nil {
			t.Fatalf("checking %q: %v", src, err)
		}
		if s.MainFound && s.SyntaxError != "" {
			t.Fatalf("%q: main found in a script with a syntax error", src)
		}
		if !s.MainFound && s.Problem("x.py") == "" {
			t.Fatalf("%q: no main and no problem to report", src)
		}
	})
}
