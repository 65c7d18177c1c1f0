// Package examples ships the bundled example job that `gaas demo` runs: a
// small pure-Python logistic regression and its dataset.
package examples

import _ "embed"

// Dataset is students.csv: hours studied, attendance and prior score, and
// whether the student passed.
//
//go:embed students.csv
var Dataset []byte

// Script is train.py, which trains on Dataset and saves model.json.
//
//go:embed train.py
var Script []byte

// File names the example is submitted under.
const (
	DatasetName = "students.csv"
	ScriptName  = "train.py"
)
